// The aclnnBlockAttentionResidualsGrad call example of seed 003 (test_aclnn_block_attention_residuals_grad.cpp,
// T=2, N=4, H=64), ported line by line to op_plugin's kernel API (docs/kernel_api.md): malloc
// instead of aclrtMalloc, opTensor descriptors instead of aclCreateTensor, no device or stream.
// The seed elides creating the outputs and printing them ("..."); here they are created like the
// inputs and printed, so a test can check them.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <vector>

#include "op_plugin/ops/block_attention_residuals_grad.h"
#include "op_plugin/scalar_types.h"

#define CHECK_RET(cond, return_expr) \
  do {                               \
    if (!(cond)) {                   \
      return_expr;                   \
    }                                \
  } while (0)

#define LOG_PRINT(message, ...)     \
  do {                              \
    printf(message, ##__VA_ARGS__); \
  } while (0)

int64_t GetShapeSize(const std::vector<int64_t>& shape) {
  int64_t shapeSize = 1;
  for (auto i : shape) {
    shapeSize *= i;
  }
  return shapeSize;
}

template <typename T>
int CreateAclTensor(const std::vector<T>& hostData, const std::vector<int64_t>& shape, void** deviceAddr,
                    opDataType dataType, opTensor* tensor) {
  auto size = GetShapeSize(shape) * sizeof(T);
  *deviceAddr = std::malloc(size);  // was aclrtMalloc + aclrtMemcpy
  CHECK_RET(*deviceAddr != nullptr, LOG_PRINT("malloc failed.\n"); return -1);
  std::memcpy(*deviceAddr, hostData.data(), size);
  std::vector<int64_t> strides(shape.size(), 1);
  for (int64_t i = shape.size() - 2; i >= 0; i--) {
    strides[i] = shape[i + 1] * strides[i + 1];
  }
  *tensor = opTensor{};  // was aclCreateTensor
  tensor->data = *deviceAddr;
  tensor->dtype = dataType;
  tensor->ndim = static_cast<int32_t>(shape.size());
  for (size_t i = 0; i < shape.size(); i++) {
    tensor->shape[i] = shape[i];
    tensor->strides[i] = strides[i];
  }
  return 0;
}

void PrintOutResult(const char* name, const std::vector<int64_t>& shape, void* deviceAddr) {
  auto size = GetShapeSize(shape);
  std::vector<uint16_t> resultData(size, 0);
  std::memcpy(resultData.data(), deviceAddr, size * sizeof(resultData[0]));
  for (int64_t i = 0; i < size; i++) {
    LOG_PRINT("%s result[%ld] is: %f\n", name, i, op_plugin::to_float(op_plugin::Half{resultData[i]}));
  }
}

int main() {
  int ret = 0;  // Init(deviceId, &stream): nothing to initialise on the CPU

  const int64_t T = 2;
  const int64_t N = 4;
  const int64_t H = 64;
  const int64_t N1 = N + 1;

  std::vector<int64_t> partialBlockShape = {T, H};
  std::vector<int64_t> blockResShape = {T, N, H};
  std::vector<int64_t> projWeightShape = {1, H};
  std::vector<int64_t> normWeightShape = {H};
  std::vector<int64_t> gradHiddenStatesShape = {T, H};
  std::vector<int64_t> invNormShape = {T, N1};
  std::vector<int64_t> probsShape = {T, N1};

  // main inputs in FP16 (0x3C00 is 1.0); invNorm/probs in FP32
  std::vector<uint16_t> partialBlockData(GetShapeSize(partialBlockShape), 0x3C00);
  std::vector<uint16_t> blockResData(GetShapeSize(blockResShape), 0x3C00);
  std::vector<uint16_t> projWeightData(GetShapeSize(projWeightShape), 0x3C00);
  std::vector<uint16_t> normWeightData(GetShapeSize(normWeightShape), 0x3C00);
  std::vector<uint16_t> gradHiddenStatesData(GetShapeSize(gradHiddenStatesShape), 0x3C00);
  std::vector<float> invNormData(GetShapeSize(invNormShape), 1.0f);
  std::vector<float> probsData(GetShapeSize(probsShape), 1.0f);
  int64_t validBlockNum = -1;  // reserved attribute: only -1 (or N)

  // the input tensors (malloc + memcpy + descriptor)
  void *partialBlockAddr, *blockResAddr, *projWeightAddr, *normWeightAddr, *gradHiddenStatesAddr, *invNormAddr,
      *probsAddr;
  opTensor partialBlock, blockRes, projWeight, normWeight, gradHiddenStates, invNorm, probs;
  ret = CreateAclTensor(partialBlockData, partialBlockShape, &partialBlockAddr, OP_DT_FLOAT16, &partialBlock);
  CHECK_RET(ret == 0, return ret);
  ret = CreateAclTensor(blockResData, blockResShape, &blockResAddr, OP_DT_FLOAT16, &blockRes);
  CHECK_RET(ret == 0, return ret);
  ret = CreateAclTensor(projWeightData, projWeightShape, &projWeightAddr, OP_DT_FLOAT16, &projWeight);
  CHECK_RET(ret == 0, return ret);
  ret = CreateAclTensor(normWeightData, normWeightShape, &normWeightAddr, OP_DT_FLOAT16, &normWeight);
  CHECK_RET(ret == 0, return ret);
  ret = CreateAclTensor(gradHiddenStatesData, gradHiddenStatesShape, &gradHiddenStatesAddr, OP_DT_FLOAT16,
                        &gradHiddenStates);
  CHECK_RET(ret == 0, return ret);
  ret = CreateAclTensor(invNormData, invNormShape, &invNormAddr, OP_DT_FLOAT, &invNorm);
  CHECK_RET(ret == 0, return ret);
  ret = CreateAclTensor(probsData, probsShape, &probsAddr, OP_DT_FLOAT, &probs);
  CHECK_RET(ret == 0, return ret);

  // the output tensors gradPartialBlock / gradBlockRes / gradProjWeight / gradNormWeight
  void *gradPartialBlockAddr, *gradBlockResAddr, *gradProjWeightAddr, *gradNormWeightAddr;
  opTensor gradPartialBlock, gradBlockRes, gradProjWeight, gradNormWeight;
  ret = CreateAclTensor(std::vector<uint16_t>(GetShapeSize(partialBlockShape), 0), partialBlockShape,
                        &gradPartialBlockAddr, OP_DT_FLOAT16, &gradPartialBlock);
  CHECK_RET(ret == 0, return ret);
  ret = CreateAclTensor(std::vector<uint16_t>(GetShapeSize(blockResShape), 0), blockResShape, &gradBlockResAddr,
                        OP_DT_FLOAT16, &gradBlockRes);
  CHECK_RET(ret == 0, return ret);
  ret = CreateAclTensor(std::vector<uint16_t>(GetShapeSize(projWeightShape), 0), projWeightShape,
                        &gradProjWeightAddr, OP_DT_FLOAT16, &gradProjWeight);
  CHECK_RET(ret == 0, return ret);
  ret = CreateAclTensor(std::vector<uint16_t>(GetShapeSize(normWeightShape), 0), normWeightShape,
                        &gradNormWeightAddr, OP_DT_FLOAT16, &gradNormWeight);
  CHECK_RET(ret == 0, return ret);

  uint64_t workspaceSize = 0;
  opExecutor* executor;
  // stage 1: the workspace size and the executor
  ret = BlockAttentionResidualsGradGetWorkspaceSize(&partialBlock, &blockRes, &projWeight, &normWeight,
                                                    &gradHiddenStates, &invNorm, &probs, validBlockNum,
                                                    &gradPartialBlock, &gradBlockRes, &gradProjWeight,
                                                    &gradNormWeight, &workspaceSize, &executor);
  CHECK_RET(ret == OP_SUCCESS,
            LOG_PRINT("BlockAttentionResidualsGradGetWorkspaceSize failed. ERROR: %d %s\n", ret,
                      opGetLastErrorMessage());
            return ret);
  // the workspace (if workspaceSize > 0)
  void* workspaceAddr = nullptr;
  if (workspaceSize > 0) {
    workspaceAddr = std::malloc(workspaceSize);
  }
  // stage 2: compute
  ret = BlockAttentionResidualsGrad(workspaceAddr, workspaceSize, executor, nullptr);
  CHECK_RET(ret == OP_SUCCESS,
            LOG_PRINT("BlockAttentionResidualsGrad failed. ERROR: %d %s\n", ret, opGetLastErrorMessage());
            return ret);
  // (aclrtSynchronizeStream: stage 2 returns when the result is there)
  PrintOutResult("gradPartialBlock", partialBlockShape, gradPartialBlockAddr);
  PrintOutResult("gradBlockRes", blockResShape, gradBlockResAddr);
  PrintOutResult("gradProjWeight", projWeightShape, gradProjWeightAddr);
  PrintOutResult("gradNormWeight", normWeightShape, gradNormWeightAddr);

  // release (aclDestroyTensor / aclrtFree)
  for (void* p : {partialBlockAddr, blockResAddr, projWeightAddr, normWeightAddr, gradHiddenStatesAddr, invNormAddr,
                  probsAddr, gradPartialBlockAddr, gradBlockResAddr, gradProjWeightAddr, gradNormWeightAddr}) {
    std::free(p);
  }
  if (workspaceSize > 0) {
    std::free(workspaceAddr);
  }
  return 0;
}
