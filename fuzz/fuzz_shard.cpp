// llm.c token shards: the 256-int header, size against count, token reads,
// the vocabulary scan and the fingerprint.
#include "data/shard.h"
#include "fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = kdtrain::fuzz::write_scratch("input.bin", data, size);
  kdtrain::fuzz::expect_only_kdtrain_errors([&] {
    const kdtrain::data::TokenShard shard(path);
    (void)shard.stats();
    if (shard.size() > 0) {
      (void)shard.token(shard.size() - 1);
      int32_t first[4];
      if (shard.size() >= 4) shard.copy_tokens(0, 4, first);
    }
    shard.validate_vocab(50000);
  });
  return 0;
}
