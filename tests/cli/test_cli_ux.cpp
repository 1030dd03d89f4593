// What a newcomer reads: typo suggestions for commands and flags,
// the warmup clamp's notice, the run summary.
#include <catch2/catch.hpp>

#include <fstream>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "cli/commands.h"
#include "cli/config_help.h"
#include "cli/suggest.h"
#include "config/config.h"
#include "train/metrics.h"

using namespace kdtrain;
using Catch::Matchers::Contains;

namespace {

// The same command tree main() builds.
struct KdtrainApp {
  CLI::App app{"kdtrain"};
  KdtrainApp() {
    app.require_subcommand(1);
    cli::register_commands(app);
  }
  std::string explain(const std::vector<std::string>& args) const {
    return cli::explain_unknown_argument(app, args);
  }
};

}  // namespace

TEST_CASE("cli: edit distance counts a swap of neighbours as one edit", "[cli][suggest]") {
  CHECK(cli::edit_distance("train", "train") == 0);
  CHECK(cli::edit_distance("trian", "train") == 1);  // swap
  CHECK(cli::edit_distance("--confg", "--config") == 1);  // insertion
  CHECK(cli::edit_distance("evl", "eval") == 1);
  CHECK(cli::edit_distance("", "abc") == 3);
  CHECK(cli::nearest("trian", {"info", "init", "train", "eval"}) == "train");
  CHECK(cli::nearest("xyzzy", {"info", "init", "train", "eval"}).empty());  // too far to be a typo
}

TEST_CASE("cli: a misspelled command or flag names the nearest one", "[cli][suggest]") {
  KdtrainApp k;
  CHECK(k.explain({"trian"}).rfind("unknown command 'trian'; did you mean 'train'?", 0) == 0);
  CHECK_THAT(k.explain({"exprot", "--out", "x"}), Contains("did you mean 'export'?"));
  const std::string far = k.explain({"fly"});
  CHECK_THAT(far, Contains("unknown command 'fly'") && Contains("commands: info, init"));
  CHECK_THAT(far, !Contains("did you mean"));
  CHECK_THAT(k.explain({"train", "--confg", "c.json"}),
             Contains("train: unknown option '--confg'; did you mean '--config'?") &&
                 Contains("kdtrain train --help"));
  CHECK_THAT(k.explain({"train", "--run-dri=x"}), Contains("did you mean '--run-dir'?"));
  CHECK_THAT(k.explain({"data", "wirte", "--bytes", "a"}), Contains("data: unknown command 'wirte'; did you mean 'write'?"));
  CHECK_THAT(k.explain({"eval", "--seqlen", "64"}), Contains("did you mean '--seq-len'?"));
  // Correct command lines, values that look like words, and '--' are left alone.
  CHECK(k.explain({"train", "--config", "trian.json", "--set", "train.steps=5"}).empty());
  CHECK(k.explain({"data", "write", "--bytes", "some.txt", "--out", "train.bin"}).empty());
  CHECK(k.explain({"info", "--preset", "tiny-llama", "--json"}).empty());
}

TEST_CASE("config: a warmup longer than the run is clamped with a notice naming the --set", "[config]") {
  Config c = load_config("", "tiny-llama", "", {"train.steps=20"});  // warmup default 100
  CHECK(c.schedule.warmup == 20);
  Config d;
  d.train.steps = 30;
  d.schedule.warmup = 50;
  CHECK_THAT(clamp_warmup(d), Contains("schedule.warmup (50) is longer than the run (train.steps 30)") &&
                                  Contains("--set schedule.warmup=N"));
  CHECK(d.schedule.warmup == 30);
  CHECK(clamp_warmup(d).empty());  // nothing left to clamp
  Config e = load_config("", "tiny-llama", "", {"train.steps=200", "schedule.warmup=10"});
  CHECK(e.schedule.warmup == 10);  // a warmup that fits is kept
}

TEST_CASE("metrics: the run summary gives losses, tokens, time, rate and the checkpoint", "[metrics]") {
  RunSummary s;
  s.step = 200;
  s.total_steps = 200;
  s.steps_run = 100;
  s.tokens = 51200;
  s.seconds = 12.8;
  s.last = {{"step", 200}, {"loss", 2.5}, {"kd", 2.0}, {"ce", 3.0}};
  s.last_val = {{"step", 200}, {"val_loss", 2.75}, {"val_kd", 2.25}, {"val_ce", 3.25}};
  s.checkpoint = "runs/demo/checkpoints/step_00000200";
  s.has_teacher = s.val_has_teacher = true;
  const std::vector<std::string> lines = summary_lines(s);
  REQUIRE(lines.size() == 4);
  CHECK_THAT(lines[0], Contains("run finished at step 200/200: 100 steps, 0.0512M tokens in 0m13s (4.0k tok/s)"));
  CHECK_THAT(lines[1], Contains("final train loss 2.5000 (kd 2.0000, ce 3.0000) at step 200"));
  CHECK_THAT(lines[2], Contains("final val loss   2.7500 (kd 2.2500, ce 3.2500) at step 200"));
  CHECK_THAT(lines[3], Contains("checkpoint: runs/demo/checkpoints/step_00000200"));
  s.last_val = nullptr;
  s.stopped = true;
  const std::vector<std::string> stopped = summary_lines(s);
  CHECK_THAT(stopped[0], Contains("run stopped at step 200/200"));
  CHECK_THAT(stopped[2], Contains("no validation loss"));
  s.has_teacher = s.val_has_teacher = false;  // CE only: no KD column
  CHECK_THAT(summary_lines(s)[1], Contains("final train loss 2.5000 (ce) at step 200"));
  const nlohmann::json val = {{"step", 50}, {"val_loss", 1.0}, {"val_kd", 0.5}, {"val_ce", 1.5}};
  CHECK(validation_line(val, 100, true) == "step 50/100 | val loss 1.0000 | val kd 0.5000 | val ce 1.5000");
  CHECK(validation_line(val, 100, false) == "step 50/100 | val loss 1.0000 (ce)");
  const nlohmann::json rec = {{"step", 50}, {"loss", 2.5}, {"kd", 2.0}, {"ce", 3.0}, {"lr", 1e-3},
                              {"grad_norm", 0.5}, {"tokens_per_s", 41200.0}};
  CHECK(progress_line(rec, 100, 90, true) ==
        "step 50/100 | loss 2.5000 | kd 2.0000 | ce 3.0000 | lr 1.00e-03 | gnorm 0.500 | 41.2k tok/s | eta 1m30s");
  CHECK(progress_line(rec, 100, 90, false) ==
        "step 50/100 | loss 2.5000 | lr 1.00e-03 | gnorm 0.500 | 41.2k tok/s | eta 1m30s");  // no teacher: no kd
}

TEST_CASE("config --list: every key the config writes has a meaning, and docs/config.md documents it",
          "[cli][config]") {
  std::set<std::string> written, listed;
  for (const auto& [key, value] : cli::flatten_config(to_json(Config{}))) written.insert(key);
  for (const cli::HelpLine& k : cli::config_keys()) CHECK(listed.insert(k.name).second);  // no duplicates
  CHECK(listed == written);
  std::set<std::string> sections;
  for (const cli::HelpLine& s : cli::config_sections()) sections.insert(s.name);
  for (const std::string& key : written) CHECK(sections.count(key.substr(0, key.find('.'))) == 1);

  // docs/config.md: each key is a row "| `name` |" of the table under its section
  // ("### `section`"; nested keys under "`model.rope_scaling`:").
  std::ifstream in(std::string(KDTRAIN_SOURCE_DIR) + "/docs/config.md");
  REQUIRE(in);
  std::set<std::string> documented;
  std::string line, section;
  while (std::getline(in, line)) {
    if (line.rfind("### `", 0) == 0) section = line.substr(5, line.find('`', 5) - 5);
    else if (line.rfind("`model.rope_scaling`:", 0) == 0) section = "model.rope_scaling";
    else if (line.rfind("## ", 0) == 0) section.clear();
    else if (!section.empty() && line.rfind("| `", 0) == 0)
      documented.insert(section + "." + line.substr(3, line.find('`', 3) - 3));
  }
  for (const std::string& key : written)
    CHECK(documented.count(key) == 1);

  const std::string table = cli::config_key_table();
  CHECK_THAT(table, Contains("optimizer.lr") && Contains("0.001") && Contains("peak learning rate"));
  CHECK_THAT(table, Contains("docs/config.md"));
  const std::string footer = cli::config_sections_text();
  CHECK_THAT(footer, Contains("schedule") && Contains("kdtrain config --list") && Contains("docs/config.md"));
}

TEST_CASE("presets: tiny-llama3 / tiny-qwen2 are the tiny shapes on the real vocabularies", "[config]") {
  for (const auto& [name, shape, real] : {std::tuple{"tiny-llama3", "tiny-llama", "llama3.2-1b"},
                                          std::tuple{"tiny-qwen2", "tiny-qwen", "qwen1.5-0.5b"}}) {
    INFO(name);
    const ModelConfig m = model_preset(name), s = model_preset(shape), r = model_preset(real);
    CHECK(m.hidden_size == s.hidden_size);
    CHECK(m.intermediate_size == s.intermediate_size);
    CHECK(m.num_hidden_layers == s.num_hidden_layers);
    CHECK(m.num_attention_heads == s.num_attention_heads);
    CHECK(m.num_key_value_heads == s.num_key_value_heads);
    CHECK(m.head_dim == s.head_dim);
    CHECK(m.family == r.family);
    CHECK(m.vocab_size == r.vocab_size);
    CHECK(m.max_position_embeddings == r.max_position_embeddings);
    CHECK(m.rope_theta == r.rope_theta);
    CHECK(m.rope_scaling.type == r.rope_scaling.type);
    CHECK(m.rope_scaling.factor == r.rope_scaling.factor);
    CHECK(m.attention_bias == r.attention_bias);
    CHECK(m.tie_word_embeddings);
  }
  CHECK(model_preset("tiny-llama3").vocab_size == 128256);
  CHECK(model_preset("tiny-qwen2").vocab_size == 151936);
}
