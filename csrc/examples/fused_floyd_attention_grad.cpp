// The aclnnFusedFloydAttentionGrad call example of seed 001, ported line by line to op_plugin's
// kernel API (docs/kernel_api.md): malloc instead of aclrtMalloc and aclrtMemcpy, opTensor
// descriptors instead of aclCreateTensor, no device, stream or ACL init. Two differences: the
// seed fills float host vectors into tensors it declares FLOAT16; here the host data is converted
// to float16 (op_plugin/scalar_types.h), so the bytes are what the dtype says. And the sizes may
// be given as arguments (S1 S2 S3 D; default the seed's 256 256 256 128), so a test can run a
// small case: the seed prints every element of dq.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <vector>

#include "op_plugin/ops/fused_floyd_attention_grad.h"
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

void PrintOutResult(std::vector<int64_t>& shape, void** deviceAddr) {
  auto size = GetShapeSize(shape);
  std::vector<op_plugin::Half> resultData(size);
  std::memcpy(resultData.data(), *deviceAddr, size * sizeof(resultData[0]));  // was aclrtMemcpy device to host
  for (int64_t i = 0; i < size; i++) {
    LOG_PRINT("mean result[%ld] is: %f\n", i, op_plugin::to_float(resultData[i]));
  }
}

template <typename T>
int CreateAclTensor(const std::vector<T>& hostData, const std::vector<int64_t>& shape, void** deviceAddr,
                    opDataType dataType, opTensor* tensor) {
  auto size = GetShapeSize(shape) * sizeof(T);
  // malloc instead of aclrtMalloc; the copy stays (host to host)
  *deviceAddr = std::malloc(size);
  CHECK_RET(*deviceAddr != nullptr, LOG_PRINT("malloc failed.\n"); return -1);
  std::memcpy(*deviceAddr, hostData.data(), size);
  // strides of a contiguous tensor
  std::vector<int64_t> strides(shape.size(), 1);
  for (int64_t i = shape.size() - 2; i >= 0; i--) {
    strides[i] = shape[i + 1] * strides[i + 1];
  }
  // an opTensor descriptor instead of aclCreateTensor
  *tensor = opTensor{};
  tensor->data = *deviceAddr;
  tensor->dtype = dataType;
  tensor->ndim = static_cast<int32_t>(shape.size());
  for (size_t i = 0; i < shape.size(); i++) {
    tensor->shape[i] = shape[i];
    tensor->strides[i] = strides[i];
  }
  return 0;
}

std::vector<op_plugin::Half> ToHalf(const std::vector<float>& data) {
  std::vector<op_plugin::Half> half(data.size());
  for (size_t i = 0; i < data.size(); i++) half[i] = op_plugin::to_half(data[i]);
  return half;
}

int main(int argc, char** argv) {
  // 1. (device/stream initialisation: nothing to do on the CPU)
  int ret = 0;
  // 2. inputs and outputs
  int64_t B = 1;
  int64_t N = 1;
  int64_t S1 = argc > 4 ? std::atoll(argv[1]) : 256;
  int64_t S2 = argc > 4 ? std::atoll(argv[2]) : 256;
  int64_t S3 = argc > 4 ? std::atoll(argv[3]) : 256;
  int64_t D = argc > 4 ? std::atoll(argv[4]) : 128;
  int64_t q_size = B * N * S1 * S2 * D;
  int64_t k1_v1_size = B * N * S1 * S3 * D;
  int64_t k2_v2_size = B * N * S3 * S2 * D;
  int64_t atten_mask_size = B * S1 * S3;
  int64_t softmax_size = B * N * S1 * S2 * 8;
  std::vector<int64_t> qShape = {B, N, S1, S2, D};
  std::vector<int64_t> k1v1Shape = {B, N, S1, S3, D};
  std::vector<int64_t> k2v2Shape = {B, N, S3, S2, D};
  std::vector<int64_t> attenmaskShape = {B, 1, S1, 1, S3};
  std::vector<int64_t> softmaxMaxShape = {B, N, S1, S2, 8};
  std::vector<int64_t> softmaxSumShape = {B, N, S1, S2, 8};
  std::vector<int64_t> attentionInShape = {B, N, S1, S2, D};
  std::vector<int64_t> dqShape = {B, N, S1, S2, D};
  std::vector<int64_t> dk1dv1Shape = {B, N, S1, S3, D};
  std::vector<int64_t> dk2dv2Shape = {B, N, S3, S2, D};
  void* qDeviceAddr = nullptr;
  void* k1DeviceAddr = nullptr;
  void* v1DeviceAddr = nullptr;
  void* k2DeviceAddr = nullptr;
  void* v2DeviceAddr = nullptr;
  void* dxDeviceAddr = nullptr;
  void* attenmaskDeviceAddr = nullptr;
  void* softmaxMaxDeviceAddr = nullptr;
  void* softmaxSumDeviceAddr = nullptr;
  void* attentionInDeviceAddr = nullptr;
  void* dqDeviceAddr = nullptr;
  void* dk1DeviceAddr = nullptr;
  void* dv1DeviceAddr = nullptr;
  void* dk2DeviceAddr = nullptr;
  void* dv2DeviceAddr = nullptr;
  opTensor q, k1, v1, k2, v2, dx, attenmask, softmaxMax, softmaxSum, attentionIn, dq, dk1, dv1, dk2, dv2;
  std::vector<float> qHostData(q_size, 1.0);
  std::vector<float> k1HostData(k1_v1_size, 1.0);
  std::vector<float> v1HostData(k1_v1_size, 1.0);
  std::vector<float> k2HostData(k2_v2_size, 1.0);
  std::vector<float> v2HostData(k2_v2_size, 1.0);
  std::vector<float> dxHostData(q_size, 1.0);
  std::vector<uint8_t> attenmaskHostData(atten_mask_size, 0);
  std::vector<float> softmaxMaxHostData(softmax_size, 3.0);
  std::vector<float> softmaxSumHostData(softmax_size, 3.0);
  std::vector<float> attentionInHostData(q_size, 1.0);
  std::vector<float> dqHostData(q_size, 0);
  std::vector<float> dk1HostData(k1_v1_size, 0);
  std::vector<float> dv1HostData(k1_v1_size, 0);
  std::vector<float> dk2HostData(k2_v2_size, 0);
  std::vector<float> dv2HostData(k2_v2_size, 0);
  ret = CreateAclTensor(ToHalf(qHostData), qShape, &qDeviceAddr, OP_DT_FLOAT16, &q);
  CHECK_RET(ret == OP_SUCCESS, return ret);
  ret = CreateAclTensor(ToHalf(k1HostData), k1v1Shape, &k1DeviceAddr, OP_DT_FLOAT16, &k1);
  CHECK_RET(ret == OP_SUCCESS, return ret);
  ret = CreateAclTensor(ToHalf(v1HostData), k1v1Shape, &v1DeviceAddr, OP_DT_FLOAT16, &v1);
  CHECK_RET(ret == OP_SUCCESS, return ret);
  ret = CreateAclTensor(ToHalf(k2HostData), k2v2Shape, &k2DeviceAddr, OP_DT_FLOAT16, &k2);
  CHECK_RET(ret == OP_SUCCESS, return ret);
  ret = CreateAclTensor(ToHalf(v2HostData), k2v2Shape, &v2DeviceAddr, OP_DT_FLOAT16, &v2);
  CHECK_RET(ret == OP_SUCCESS, return ret);
  ret = CreateAclTensor(ToHalf(dxHostData), qShape, &dxDeviceAddr, OP_DT_FLOAT16, &dx);
  CHECK_RET(ret == OP_SUCCESS, return ret);
  ret = CreateAclTensor(attenmaskHostData, attenmaskShape, &attenmaskDeviceAddr, OP_DT_UINT8, &attenmask);
  CHECK_RET(ret == OP_SUCCESS, return ret);
  ret = CreateAclTensor(softmaxMaxHostData, softmaxMaxShape, &softmaxMaxDeviceAddr, OP_DT_FLOAT, &softmaxMax);
  CHECK_RET(ret == OP_SUCCESS, return ret);
  ret = CreateAclTensor(softmaxSumHostData, softmaxSumShape, &softmaxSumDeviceAddr, OP_DT_FLOAT, &softmaxSum);
  CHECK_RET(ret == OP_SUCCESS, return ret);
  ret = CreateAclTensor(ToHalf(attentionInHostData), attentionInShape, &attentionInDeviceAddr, OP_DT_FLOAT16,
                        &attentionIn);
  CHECK_RET(ret == OP_SUCCESS, return ret);
  ret = CreateAclTensor(ToHalf(dqHostData), dqShape, &dqDeviceAddr, OP_DT_FLOAT16, &dq);
  CHECK_RET(ret == OP_SUCCESS, return ret);
  ret = CreateAclTensor(ToHalf(dk1HostData), dk1dv1Shape, &dk1DeviceAddr, OP_DT_FLOAT16, &dk1);
  CHECK_RET(ret == OP_SUCCESS, return ret);
  ret = CreateAclTensor(ToHalf(dv1HostData), dk1dv1Shape, &dv1DeviceAddr, OP_DT_FLOAT16, &dv1);
  CHECK_RET(ret == OP_SUCCESS, return ret);
  ret = CreateAclTensor(ToHalf(dk2HostData), dk2dv2Shape, &dk2DeviceAddr, OP_DT_FLOAT16, &dk2);
  CHECK_RET(ret == OP_SUCCESS, return ret);
  ret = CreateAclTensor(ToHalf(dv2HostData), dk2dv2Shape, &dv2DeviceAddr, OP_DT_FLOAT16, &dv2);
  CHECK_RET(ret == OP_SUCCESS, return ret);
  double scaleValue = 1.0 / sqrt(static_cast<double>(D));  // the seed's 1.0/sqrt(128) at its D
  // 3. the kernel API's two stages
  uint64_t workspaceSize = 0;
  opExecutor* executor;
  // stage 1
  ret = FusedFloydAttentionGradGetWorkspaceSize(&dx, &q, &k1, &v1, &k2, &v2, &attentionIn, &softmaxMax, &softmaxSum,
                                                &attenmask, scaleValue, &dq, &dk1, &dv1, &dk2, &dv2, &workspaceSize,
                                                &executor);
  CHECK_RET(ret == OP_SUCCESS,
            LOG_PRINT("FusedFloydAttentionGradGetWorkspaceSize failed. ERROR: %d %s\n", ret, opGetLastErrorMessage());
            return ret);
  // the workspace stage 1 asked for
  void* workspaceAddr = nullptr;
  if (workspaceSize > 0) {
    workspaceAddr = std::malloc(workspaceSize);
    CHECK_RET(workspaceAddr != nullptr, LOG_PRINT("allocate workspace failed.\n"); return -1);
  }
  // stage 2
  ret = FusedFloydAttentionGrad(workspaceAddr, workspaceSize, executor, nullptr);
  CHECK_RET(ret == OP_SUCCESS,
            LOG_PRINT("FusedFloydAttentionGrad failed. ERROR: %d %s\n", ret, opGetLastErrorMessage()); return ret);
  // 4. (no stream to synchronise: stage 2 returns when the result is there)
  // 5. the result
  PrintOutResult(dqShape, &dqDeviceAddr);
  // PrintOutResult(dkShape, &dkDeviceAddr);
  // PrintOutResult(dvShape, &dvDeviceAddr);
  // 6. (descriptors own nothing) 7. free the memory
  std::free(qDeviceAddr);
  std::free(k1DeviceAddr);
  std::free(v1DeviceAddr);
  std::free(k2DeviceAddr);
  std::free(v2DeviceAddr);
  std::free(dxDeviceAddr);
  std::free(attenmaskDeviceAddr);
  std::free(softmaxMaxDeviceAddr);
  std::free(softmaxSumDeviceAddr);
  std::free(attentionInDeviceAddr);
  std::free(dqDeviceAddr);
  std::free(dk1DeviceAddr);
  std::free(dv1DeviceAddr);
  std::free(dk2DeviceAddr);
  std::free(dv2DeviceAddr);
  if (workspaceSize > 0) {
    std::free(workspaceAddr);
  }
  return 0;
}
