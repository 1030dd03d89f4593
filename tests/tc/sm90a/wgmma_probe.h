// The wgmma probe on the device (wgmma_probe_sm90a.cu, built for sm_90a into the test
// binary only): runs wgmma_probe_body on host-side arguments, copying them to the device
// and D back into args.d.
#pragma once
#include "tc/sm90a/wgmma_probe_body.cuh"

namespace kdtrain::wgmmatest {

void run_wgmma_probe_on_device(const WgmmaProbeArgs& host_args);

}  // namespace kdtrain::wgmmatest
