#!/usr/bin/env bash
# Builds the fuzz targets (fuzz/: libFuzzer + AddressSanitizer + UndefinedBehaviorSanitizer)
# and runs each for a time budget, starting from seed inputs written here.
#
#   scripts/fuzz.sh [--seconds N] [--require] [target ...]     (targets: config, safetensors, ...)
#
# CI (scripts/test.sh) runs every target for 15 s (under 2 minutes in all); for a
# longer campaign run e.g. `scripts/fuzz.sh --seconds 1800 safetensors`. The corpus
# grows across runs in $KDTRAIN_FUZZ_DIR/corpus/<target>. Exits 1 when a target finds
# a crash, a sanitizer error, an input taking over 10 s (a hang) or over 2 GiB of
# memory; the reproducer is kept in $KDTRAIN_FUZZ_DIR/findings/<target>/ and the
# command to replay it is printed. Without clang and libFuzzer it says SKIPPED and
# exits 0 (77 with --require).
#
# Environment: KDTRAIN_FUZZ_DIR (default build-fuzz), KDTRAIN_BUILD_JOBS (default nproc).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

SECONDS_PER_TARGET=15
REQUIRE=0
TARGETS=()
while (($#)); do
  case "$1" in
    --seconds) SECONDS_PER_TARGET="$2"; shift 2 ;;
    --seconds=*) SECONDS_PER_TARGET="${1#--seconds=}"; shift ;;
    --require) REQUIRE=1; shift ;;
    -h|--help) sed -n '2,15p' "$0"; exit 0 ;;
    -*) echo "fuzz.sh: unknown option '$1' (try --help)" >&2; exit 2 ;;
    *) TARGETS+=("$1"); shift ;;
  esac
done

FUZZ_DIR="${KDTRAIN_FUZZ_DIR:-build-fuzz}"
JOBS="${KDTRAIN_BUILD_JOBS:-$(nproc)}"

skip() {
  echo "fuzz: SKIPPED: $*"
  exit $((REQUIRE ? 77 : 0))
}
command -v clang++ >/dev/null || skip "clang++ not installed (apt-get install clang libclang-rt-dev)"
probe="$(mktemp -d)"
trap 'rm -rf "$probe"' EXIT
printf 'extern "C" int LLVMFuzzerTestOneInput(const unsigned char*, unsigned long) { return 0; }\n' > "$probe/p.cpp"
clang++ -fsanitize=fuzzer,address,undefined "$probe/p.cpp" -o "$probe/p" 2>/dev/null ||
  skip "clang++ cannot link libFuzzer with ASan/UBSan (apt-get install libclang-rt-dev)"

# --- build ---------------------------------------------------------------------
if [[ ! -f "$FUZZ_DIR/CMakeCache.txt" ]]; then
  CXX=clang++ cmake -S fuzz -B "$FUZZ_DIR" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
fi
cmake --build "$FUZZ_DIR" -j"$JOBS" >/dev/null

if ((${#TARGETS[@]} == 0)); then
  for source in fuzz/fuzz_*.cpp; do
    name="$(basename "$source" .cpp)"
    TARGETS+=("${name#fuzz_}")
  done
fi

# --- seeds: one or more valid inputs per target, made here (nothing binary is committed)
SEEDS="$FUZZ_DIR/seeds"
rm -rf "$SEEDS"
mkdir -p "$SEEDS"
python3 - "$SEEDS" "$ROOT/configs" <<'EOF'
import json, math, os, struct, sys
seeds, configs = sys.argv[1], sys.argv[2]
def put(target, name, data):
    os.makedirs(f"{seeds}/{target}", exist_ok=True)
    with open(f"{seeds}/{target}/{name}", "wb") as f:
        f.write(data if isinstance(data, bytes) else data.encode())

for name in sorted(os.listdir(configs)):
    if name.endswith(".json"):
        put("config", name, open(os.path.join(configs, name), "rb").read())
put("config", "sections", json.dumps({"model": {"preset": "tiny-llama", "vocab_size": 300},
    "train": {"steps": 10, "seq_len": 32, "global_batch": 4, "micro_batch": 2, "on_nonfinite": "skip"},
    "optimizer": {"lr": 0.001}, "schedule": {"kind": "cosine", "warmup": 2}, "kd": {"loss": "reverse_kl"},
    "data": {"train": ["a.bin", "b/*.bin"]}, "attention": {"variant": "sink"}}))

def safetensors(tensors, metadata=None):
    header, data = {}, b""
    for name, (dtype, shape, payload) in tensors.items():
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(data), len(data) + len(payload)]}
        data += payload
    if metadata:
        header["__metadata__"] = metadata
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text + data
put("safetensors", "f32", safetensors({"w": ("F32", [2, 3], struct.pack("<6f", *range(6))),
                                       "b": ("BF16", [2], b"\x80\x3f\x00\x40")}, {"format": "pt"}))
put("safetensors", "mixed", safetensors({"a": ("F16", [1], b"\x00\x3c"), "i": ("I32", [2], b"\0" * 8),
                                         "d": ("F64", [1], struct.pack("<d", 1.5)), "e": ("F32", [0], b"")}))

def shard(magic, version, tokens, fmt):
    return struct.pack("<256i", magic, version, len(tokens), *([0] * 253)) + struct.pack(f"<{len(tokens)}{fmt}", *tokens)
put("shard", "u16", shard(20240520, 1, [1, 2, 3, 65535, 7], "H"))
put("shard", "u32", shard(20240801, 7, [1, 2, 100000], "I"))

def cache(K, V, T, windows, value_type):  # one shard of a version-2 cache (docs/distillation.md)
    vb = 2 if value_type == 0 else 4
    bits = max(1, (V - 1).bit_length())
    record = ((T * K * bits + 63) // 64 * 8 + T * K * vb + T * 4 + 7) // 8 * 8
    header = b"KDTCACHE" + struct.pack("<II", 2, value_type) + struct.pack("<qqqqQQq", K, V, T, windows, 5, 6, record)
    header += struct.pack("<qqqqq", bits, 0, 1, 0, windows)
    header += b"\0" * (256 - len(header))
    body = header + b"\0" * (record * windows)
    h = 0xcbf29ce484222325
    for (w,) in struct.iter_unpack("<Q", body):
        h = ((h ^ w) * 0x100000001b3) % 2**64
    return body + struct.pack("<Q", ((h ^ len(body)) * 0x100000001b3) % 2**64) + b"KDTCEND\0"
put("teacher_cache", "bf16", cache(2, 10, 3, 2, 0))
put("teacher_cache", "f32", cache(1, 4, 2, 1, 1))
# teacher_cache_values: four bytes choosing the value type, K, V, T (fuzz/fuzz_teacher_cache_values.cpp),
# then window records that hold what a teacher writes: distinct ids, log-probabilities and a tail summing to 1.
def record(ids, logp, tail, value_type, V):  # ids packed in ceil(log2 V) bits, little-endian
    bits = max(1, (V - 1).bit_length())
    packed = sum(i << (k * bits) for k, i in enumerate(ids))
    body = packed.to_bytes((len(ids) * bits + 63) // 64 * 8, "little")
    body += struct.pack(f"<{len(logp)}f", *logp) if value_type else struct.pack(f"<{len(logp)}H", *[
        struct.unpack("<I", struct.pack("<f", v))[0] >> 16 for v in logp])
    body += struct.pack(f"<{len(tail)}f", *tail)
    return body + b"\0" * (-len(body) % 8)
put("teacher_cache_values", "one_id", bytes([0, 0, 0, 0]) + record([0], [0.0], [float("-inf")], 0, 1))
put("teacher_cache_values", "f32_k2", bytes([1, 1, 2, 0]) + record([0, 3], [math.log(0.5), math.log(0.25)],
                                                                [math.log(0.25)], 1, 4))

put("trainer_state", "state", json.dumps({"step": 8, "skipped_steps": 1, "consecutive_skips": 0, "world_size": 2,
    "sampler": {"seed": 1, "epoch": 0, "index": 32, "num_windows": 100}, "data_fingerprint": "1234567890123",
    "teacher_fingerprint": "model:00ff", "pending_metrics": [{"step": 8, "loss": 1.5}]}))

llama = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64, "intermediate_size": 128,
         "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 256,
         "max_position_embeddings": 256, "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "tie_word_embeddings": True,
         "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                          "original_max_position_embeddings": 128}, "attention_variant": "affine"}
put("hf_config", "llama", json.dumps(llama))
put("hf_config", "qwen", json.dumps({"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "hidden_size": 32,
    "intermediate_size": 64, "num_hidden_layers": 1, "num_attention_heads": 2, "vocab_size": 100,
    "max_position_embeddings": 64, "rms_norm_eps": 1e-6, "rope_parameters": {"rope_theta": 1e6, "rope_type": "default"}}))

names = ["model.embed_tokens.weight", "model.norm.weight"] + [
    f"model.layers.{l}.{t}" for l in range(2) for t in
    ("input_layernorm.weight", "self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight",
     "self_attn.o_proj.weight", "post_attention_layernorm.weight", "mlp.gate_proj.weight", "mlp.up_proj.weight",
     "mlp.down_proj.weight")]
# JSON: documents, and the NUL / trailing-data forms every JSON reader refuses
# (a hidden second document after a NUL, data after the document), for every JSON target.
doc = json.dumps({"train": {"steps": 3}, "data": {"train": ["a.bin"]}})
put("json", "doc", doc)
put("json", "spaces", " \t\n" + doc + " \n")
for target in ("json", "config", "trainer_state", "hf_config", "hf_index"):
    put(target, "nul_second_document", doc.encode() + b"\0" + doc.encode())
    put(target, "nul_padding", doc.encode() + b"\0" * 8)
    put(target, "trailing_data", doc + " {}")
# A safetensors header padded with NULs (the reference implementation refuses it) and data after the last tensor.
def padded_header(pad):
    text = json.dumps({"w": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}}).encode() + pad
    return struct.pack("<Q", len(text)) + text + struct.pack("<f", 1.0)
put("safetensors", "nul_padded_header", padded_header(b"\0" * 8))
put("safetensors", "trailing_bytes", padded_header(b" " * 8) + b"\0" * 8)

put("hf_index", "index", json.dumps({"metadata": {"total_size": 1}, "weight_map": {n: "model-00001-of-00001.safetensors" for n in names}}))
EOF

# --- run -------------------------------------------------------------------------
failed=()
for target in "${TARGETS[@]}"; do
  binary="$FUZZ_DIR/fuzz_$target"
  [[ -x "$binary" ]] || { echo "fuzz: no target '$target' (fuzz/fuzz_$target.cpp)" >&2; exit 2; }
  corpus="$FUZZ_DIR/corpus/$target"
  findings="$FUZZ_DIR/findings/$target"
  mkdir -p "$corpus" "$findings"
  log="$FUZZ_DIR/fuzz_$target.log"
  # -timeout: one input taking longer is a hang; -rss_limit_mb: unbounded memory is a finding.
  if "$binary" "$corpus" "$SEEDS/$target" -max_total_time="$SECONDS_PER_TARGET" -timeout=10 \
      -rss_limit_mb=2048 -max_len=65536 -print_final_stats=1 -artifact_prefix="$findings/" >"$log" 2>&1; then
    runs="$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)"
    echo "fuzz: $target: ok (${runs:-?} inputs in ${SECONDS_PER_TARGET}s, corpus $(ls "$corpus" | wc -l))"
  else
    echo "fuzz: $target: FAILED (log $log)"
    grep -E "ERROR|SUMMARY|Test unit written|terminate called|what\(\)" "$log" | head -20 | sed 's/^/    /'
    echo "    replay: $binary $findings/<file>"
    failed+=("$target")
  fi
done
if ((${#failed[@]})); then
  echo "fuzz: FAILED: ${failed[*]}"
  exit 1
fi
echo "fuzz: all ${#TARGETS[@]} targets ok"
