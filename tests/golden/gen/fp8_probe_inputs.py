# Inputs of fp8_cuda_probe.cu: 2^21 random fp32 bit patterns (half with exponents near the FP8
# ranges), every midpoint of adjacent E4M3/E5M2 values with its float neighbours, specials.
# Writes x.bin (int32 n, n floats). Needs numpy and ml_dtypes.
import numpy as np,ml_dtypes as M
r=np.random.default_rng(7);n=2**21
u=r.integers(0,2**32,n,dtype=np.uint64).astype(np.uint32);e=r.integers(101,147,n).astype(np.uint32)
u[1::2]=(u[1::2]&0x807FFFFF)|(e[1::2]<<23);x=[u.view(np.float32)]
for t in(M.float8_e4m3fn,M.float8_e5m2):
 v=np.arange(128,dtype=np.uint8).view(t).astype(np.float32);v=np.sort(v[np.isfinite(v)]);v=np.append(v,v[-1]*8/7 if t==M.float8_e5m2 else 480)
 m=((v[:-1].astype(float)+v[1:])/2).astype(np.float32);b=np.concatenate([v,m,np.nextafter(m,0),np.nextafter(m,np.float32(np.inf))]);x+=[b,-b]
x+=[np.array([np.inf,-np.inf,np.nan,-np.nan,1e9,3e38,2**-10,2**-17],np.float32)];x=np.concatenate(x).astype(np.float32)
open('x.bin','wb').write(np.int32(len(x)).tobytes()+x.tobytes())
