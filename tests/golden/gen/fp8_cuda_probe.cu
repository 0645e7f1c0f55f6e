// fp8_cuda_probe.cu — the program that settled NUMERICS.md §10 item 2 on an H100 (CUDA 13.0,
// cuBLASLt 13.1, 2026-11-23). Written compactly because it travelled to the GPU machine inside
// the command line. Usage: ./probe x.bin cvt.bin gemm.bin
//   x.bin (from fp8_probe_inputs.py): int32 n, then n floats. cvt.bin: for each x, the device's
//   __nv_cvt_float_to_fp8 in E4M3 SATFINITE, E4M3 NOSAT, E5M2 SATFINITE, E5M2 NOSAT (4 bytes per
//   x), then __float2bfloat16_rn (n uint16). gemm.bin: the E4M3 D codes (64x64) of an E4M3 x E4M3
//   TN cuBLASLt GEMM with A/B/D scales and AMAX_D, then its A and B codes; stdout: AMAX_D and the
//   max|D| before and after D_SCALE. fp8_probe_compare.c checks the files against ref/fp8.
// Findings: see ref/fp8.h. The scale and amax pointers must be 16-byte aligned (four floats packed
// in one allocation at 4-byte offsets gave CUBLAS_STATUS_NOT_SUPPORTED from cublasLtMatmul).
#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <cstdio>
#include <cstdint>
#include <cstring>
#include <vector>
__global__ void cvt(const float*x,uint8_t*o,uint16_t*b,int n){int i=blockIdx.x*256+threadIdx.x;if(i>=n)return;
o[4*i]=__nv_cvt_float_to_fp8(x[i],__NV_SATFINITE,__NV_E4M3);o[4*i+1]=__nv_cvt_float_to_fp8(x[i],__NV_NOSAT,__NV_E4M3);
o[4*i+2]=__nv_cvt_float_to_fp8(x[i],__NV_SATFINITE,__NV_E5M2);o[4*i+3]=__nv_cvt_float_to_fp8(x[i],__NV_NOSAT,__NV_E5M2);
__nv_bfloat16 h=__float2bfloat16_rn(x[i]);b[i]=*(uint16_t*)&h;}
int main(int c,char**v){FILE*f=fopen(v[1],"rb");int n;fread(&n,4,1,f);std::vector<float>x(n);fread(x.data(),4,n,f);fclose(f);
float*dx;uint8_t*dq;uint16_t*db;cudaMalloc(&dx,4*n);cudaMalloc(&dq,4*n);cudaMalloc(&db,2*n);cudaMemcpy(dx,x.data(),4*n,cudaMemcpyHostToDevice);
cvt<<<(n+255)/256,256>>>(dx,dq,db,n);std::vector<uint8_t>q(4*n);std::vector<uint16_t>b(n);cudaMemcpy(q.data(),dq,4*n,cudaMemcpyDeviceToHost);
cudaMemcpy(b.data(),db,2*n,cudaMemcpyDeviceToHost);f=fopen(v[2],"wb");fwrite(q.data(),1,4*n,f);fwrite(b.data(),2,n,f);fclose(f);
const int M=64,N=64,K=64;std::vector<uint8_t>A(M*K),B(N*K);std::vector<float>xa(M*K),wb(N*K);uint64_t s=12345;
for(int i=0;i<M*K;i++){s=s*6364136223846793005ull+1442695040888963407ull;xa[i]=(int)(s>>60)-8;A[i]=__nv_cvt_float_to_fp8(xa[i],__NV_SATFINITE,__NV_E4M3);}
for(int i=0;i<N*K;i++){s=s*6364136223846793005ull+1442695040888963407ull;wb[i]=(int)(s>>60)-8;B[i]=__nv_cvt_float_to_fp8(wb[i],__NV_SATFINITE,__NV_E4M3);}
float sa=.5f,sb=.25f,sd=1.f/64,am=0;for(int m=0;m<M;m++)for(int j=0;j<N;j++){float a=0;for(int k=0;k<K;k++)a+=xa[m*K+k]*wb[j*K+k];a*=sa*sb;am=fmaxf(am,fabsf(a));}
uint8_t*dA,*dB,*dD;void*dC,*ws;float*sc;size_t wss=32<<20;cudaMalloc(&dA,M*K);cudaMalloc(&dB,N*K);cudaMalloc(&dD,M*N);cudaMalloc(&dC,2*M*N);cudaMalloc(&sc,1024);cudaMalloc(&ws,wss);
float h4[4]={sb,sa,sd,0};cudaMemcpy(sc,h4,16,cudaMemcpyHostToDevice);cudaMemcpy(dA,A.data(),M*K,cudaMemcpyHostToDevice);cudaMemcpy(dB,B.data(),N*K,cudaMemcpyHostToDevice);
cublasLtHandle_t lt;cublasLtCreate(&lt);cublasLtMatmulDesc_t op;cublasLtMatmulDescCreate(&op,CUBLAS_COMPUTE_32F,CUDA_R_32F);
cublasOperation_t T=CUBLAS_OP_T,NN=CUBLAS_OP_N;float*p0=sc,*p1=sc+64,*p2=sc+128,*p3=sc+192;cudaMemcpy(p1,h4+1,4,cudaMemcpyHostToDevice);cudaMemcpy(p2,h4+2,4,cudaMemcpyHostToDevice);cudaMemcpy(p3,h4+3,4,cudaMemcpyHostToDevice);
cublasLtMatmulDescSetAttribute(op,CUBLASLT_MATMUL_DESC_TRANSA,&T,4);cublasLtMatmulDescSetAttribute(op,CUBLASLT_MATMUL_DESC_TRANSB,&NN,4);
cublasLtMatmulDescSetAttribute(op,CUBLASLT_MATMUL_DESC_A_SCALE_POINTER,&p0,8);cublasLtMatmulDescSetAttribute(op,CUBLASLT_MATMUL_DESC_B_SCALE_POINTER,&p1,8);
cublasLtMatmulDescSetAttribute(op,CUBLASLT_MATMUL_DESC_D_SCALE_POINTER,&p2,8);cublasLtMatmulDescSetAttribute(op,CUBLASLT_MATMUL_DESC_AMAX_D_POINTER,&p3,8);
cublasLtMatrixLayout_t la,lb,lc,ld;cublasLtMatrixLayoutCreate(&la,CUDA_R_8F_E4M3,K,N,K);cublasLtMatrixLayoutCreate(&lb,CUDA_R_8F_E4M3,K,M,K);
cublasLtMatrixLayoutCreate(&lc,CUDA_R_16BF,N,M,N);cublasLtMatrixLayoutCreate(&ld,CUDA_R_8F_E4M3,N,M,N);
cublasLtMatmulPreference_t pr;cublasLtMatmulPreferenceCreate(&pr);cublasLtMatmulPreferenceSetAttribute(pr,CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,&wss,8);
cublasLtMatmulHeuristicResult_t hr;int nr=0;int st=cublasLtMatmulAlgoGetHeuristic(lt,op,la,lb,lc,ld,pr,1,&hr,&nr);
float al=1,be=0;int st2=cublasLtMatmul(lt,op,&al,dB,la,dA,lb,&be,nullptr,lc,dD,ld,&hr.algo,ws,wss,0);cudaDeviceSynchronize();
cudaMemcpy(h4+3,p3,4,cudaMemcpyDeviceToHost);printf("heur %d n %d mm %d: AMAX_D %.9g; max|D| before D_SCALE %.9g, after %.9g\n",st,nr,st2,h4[3],am,am*sd);
std::vector<uint8_t>dd(M*N);cudaMemcpy(dd.data(),dD,M*N,cudaMemcpyDeviceToHost);f=fopen(v[3],"wb");fwrite(dd.data(),1,M*N,f);fwrite(A.data(),1,M*K,f);fwrite(B.data(),1,N*K,f);fclose(f);}
