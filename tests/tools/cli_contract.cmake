# The command-line contract of the freezeframe tool, on the built binary, with or without a GPU:
# --help and -h on every command print its usage on stdout and exit 0; an unknown option or an
# extra argument is refused with the usage on stderr and exit 2; an error exits 1 and names no
# source file unless --verbose; serve-sim says what it is missing; bench refuses prefill shapes
# that are malformed (exit 2) or past the spec's limits (exit 1) without a GPU; tokenize prints
# ids and pieces, and refuses a broken tokenizer naming the field; inspect reads a checkpoint
# whole and says why the engine could not run one; serve refuses its bad command lines.
# Usage: cmake -DFREEZEFRAME=<tool> -DSOURCE_DIR=<checkout> -DWORK_DIR=<scratch>
#              -DVERSION=<project version> -P cli_contract.cmake

set(commands backends bench capture demo generate inspect plan serve-sim tokenize)
set(spec ${SOURCE_DIR}/configs/llama-3.1-8b.yaml)
set(tiny ${SOURCE_DIR}/examples/tiny.yaml)
file(MAKE_DIRECTORY ${WORK_DIR})
set(trace ${WORK_DIR}/two_requests.csv)
file(WRITE ${trace} "TIMESTAMP,ContextTokens,GeneratedTokens\n"
                    "2023-11-16 18:17:03.0000000,40,4\n2023-11-16 18:17:03.5000000,20,3\n")

# check(RC <code> ARGS <args...> [OUT <text>...] [NOT_OUT <text>...] [ERR <text>...]
#       [NOT_ERR <text>...])
# Runs the tool; the exit code must be <code>, stdout hold every OUT text and none of NOT_OUT,
# stderr every ERR text and none of NOT_ERR (plain substrings). No stderr may say "internal
# error".
function(check)
  cmake_parse_arguments(ARG "" "RC" "ARGS;OUT;NOT_OUT;ERR;NOT_ERR" ${ARGN})
  execute_process(COMMAND ${FREEZEFRAME} ${ARG_ARGS} RESULT_VARIABLE rc OUTPUT_VARIABLE out
                  ERROR_VARIABLE err)
  string(REPLACE ";" " " shown "freezeframe ${ARG_ARGS}")
  set(problems "")
  if(NOT rc STREQUAL ARG_RC)
    string(APPEND problems "exit code ${rc}, expected ${ARG_RC}; ")
  endif()
  foreach(text ${ARG_OUT})
    string(FIND "${out}" "${text}" at)
    if(at EQUAL -1)
      string(APPEND problems "stdout lacks '${text}'; ")
    endif()
  endforeach()
  foreach(text ${ARG_NOT_OUT})
    string(FIND "${out}" "${text}" at)
    if(NOT at EQUAL -1)
      string(APPEND problems "stdout has '${text}'; ")
    endif()
  endforeach()
  foreach(text ${ARG_ERR})
    string(FIND "${err}" "${text}" at)
    if(at EQUAL -1)
      string(APPEND problems "stderr lacks '${text}'; ")
    endif()
  endforeach()
  foreach(text ${ARG_NOT_ERR} "internal error")
    string(FIND "${err}" "${text}" at)
    if(NOT at EQUAL -1)
      string(APPEND problems "stderr has '${text}'; ")
    endif()
  endforeach()
  if(problems)
    message(SEND_ERROR "${shown}: ${problems}\nstdout:\n${out}\nstderr:\n${err}")
  else()
    message(STATUS "ok: ${shown} (exit ${rc})")
  endif()
endfunction()

check(RC 0 ARGS --help OUT "usage: freezeframe [--verbose] <command>" "serve-sim" "--version")
check(RC 0 ARGS --version OUT "freezeframe ${VERSION}")
# '-' is standard output, which then holds the JSON alone; no file named '-' is written.
file(REMOVE ${WORK_DIR}/-)
execute_process(COMMAND ${FREEZEFRAME} plan ${spec} --device-memory 80GiB --json -
                WORKING_DIRECTORY ${WORK_DIR} RESULT_VARIABLE rc OUTPUT_VARIABLE out)
string(STRIP "${out}" out)
if(NOT rc EQUAL 0 OR NOT out MATCHES "^{.*\"kv_cache\": {.*}$" OR EXISTS ${WORK_DIR}/-)
  message(SEND_ERROR "plan --json - did not write the JSON alone to stdout (exit ${rc}):\n${out}")
else()
  message(STATUS "ok: freezeframe plan --json - (JSON alone on stdout)")
endif()
check(RC 0 ARGS plan ${spec} --device-memory 80GiB --svg - OUT "<svg" NOT_OUT "kv cache:")
check(RC 2 ARGS plan ${spec} --json - --svg - ERR "both ask for standard output")
# A plan of a mixture of experts says it holds the experts whole and that the engine does not
# run them yet; one that leaves layers' MLPs out says so.
check(RC 0 ARGS plan ${SOURCE_DIR}/configs/deepseek-v2-lite.yaml --device-memory 80GiB
      OUT "note: 26 of 27 layers are a mixture of experts (64 experts of 1408, 6 a token, 2 shared)"
          "weights                               0      31412968448")
file(READ ${SOURCE_DIR}/configs/deepseek-v2-lite.yaml v2_lite_yaml)
string(REPLACE "mlp: moe" "mlp: none" v2_lite_no_moe "${v2_lite_yaml}")
file(WRITE ${WORK_DIR}/v2-lite-no-moe.yaml "${v2_lite_no_moe}")
check(RC 0 ARGS plan ${WORK_DIR}/v2-lite-no-moe.yaml --device-memory 80GiB
      OUT "note: 26 of 27 layers have no MLP (mlp: none)")
check(RC 0 ARGS plan ${spec} --device-memory 80GiB NOT_OUT "have no MLP" "mixture of experts")
check(RC 2 ARGS ERR "usage: freezeframe")
check(RC 2 ARGS no-such-command ERR "unknown command 'no-such-command'")

foreach(command ${commands})
  foreach(help --help -h)
    check(RC 0 ARGS ${command} ${help} OUT "usage: freezeframe ${command}")
  endforeach()
  check(RC 2 ARGS ${command} --no-such-option
        ERR "freezeframe ${command}: unknown option '--no-such-option'"
            "usage: freezeframe ${command}")
endforeach()
# One positional argument too many: none for these, one spec for the others.
foreach(command backends demo)
  check(RC 2 ARGS ${command} extra
        ERR "unexpected argument 'extra'" "usage: freezeframe ${command}")
endforeach()
foreach(command bench capture plan)
  check(RC 2 ARGS ${command} ${spec} ${spec}
        ERR "one spec at a time" "usage: freezeframe ${command}")
  check(RC 2 ARGS ${command} ERR "no spec file given" "usage: freezeframe ${command}")
endforeach()

# bench offers drawing the tokens on the device (the sampler's cost per step).
# The tools draw alike where the user names no sampling (kDefaultSampling).
check(RC 0 ARGS bench --help OUT "--sample" "temperature 0.8, top-k 40, top-p 0.95")
check(RC 0 ARGS serve-sim --help OUT "--sample" "temperature 0.8, top-k 40,")
check(RC 0 ARGS generate --help OUT "(default 0.8)" "(default 40)" "(default 0.95)")
check(RC 2 ARGS generate x.gguf --prompt hi --quantization fp16
      ERR "--quantization: 'fp16' is not none or fp8")

# Malformed values are usage errors too.
check(RC 2 ARGS plan ${spec} --device-memory ERR "--device-memory needs a value")
check(RC 2 ARGS plan ${spec} --device-memory 80parsecs ERR "'80parsecs' is not a size")
check(RC 2 ARGS bench ${spec} --context 1e12 ERR "--context: '1e12' is not a whole number")
check(RC 2 ARGS bench ${spec} --prefill 4x2048,,1x8 ERR "--prefill: '' is not BxN"
      "usage: freezeframe bench")
check(RC 2 ARGS bench ${spec} --prefill 4by2048 ERR "--prefill: '4by2048' is not BxN")
check(RC 2 ARGS bench ${spec} --prefill 0x2048 ERR "--prefill 0x2048: B: '0' is not a whole")
check(RC 2 ARGS bench ${spec} --prefill 1x8 --prefill-context -5
      ERR "--prefill-context: '-5' is not a whole number from 0")
# A prefill step past the spec's limits is refused before any GPU work, naming the field.
check(RC 1 ARGS bench ${tiny} --prefill 4x1024
      ERR "--prefill 4x1024: 4096 new tokens in one step; the spec allows 2048"
          "scheduler.max_num_batched_tokens" NOT_ERR ".cpp")
check(RC 1 ARGS bench ${tiny} --prefill 1x2048 --prefill-context 4000
      ERR "scheduler.max_model_len" NOT_ERR ".cpp")

# An error: its code and message, the source location only with --verbose.
check(RC 1 ARGS plan missing.yaml
      ERR "freezeframe plan: not found: cannot read spec file 'missing.yaml'" NOT_ERR ".cpp")
check(RC 1 ARGS --verbose plan missing.yaml ERR "cannot read spec file 'missing.yaml'" ".cpp:")
check(RC 0 ARGS plan ${tiny} --device-memory 2GiB OUT "kv cache:")

# Text from a spec or a flag is printed escaped and shortened: no ESC or BEL reaches the
# terminal, and a long model name is not printed whole.
string(ASCII 27 esc)
string(ASCII 7 bel)
file(READ ${tiny} tiny_text)
# (No '[' in the texts: CMake's lists do not split inside square brackets.)
string(REPLACE "name: tiny-llama" "name: \"red\\e(31m bell\\a\"" coloured_text "${tiny_text}")
file(WRITE ${WORK_DIR}/coloured.yaml "${coloured_text}")
check(RC 0 ARGS plan ${WORK_DIR}/coloured.yaml --device-memory 2GiB
      OUT "(red\\x1B(31m bell\\x07)" NOT_OUT "${esc}" "${bel}")
string(REPEAT "n" 5000 long_name)
string(REPLACE "name: tiny-llama" "name: ${long_name}" long_text "${tiny_text}")
file(WRITE ${WORK_DIR}/long_name.yaml "${long_text}")
check(RC 0 ARGS plan ${WORK_DIR}/long_name.yaml --device-memory 2GiB OUT "nnn…)"
      NOT_OUT "${long_name}")
check(RC 1 ARGS serve-sim ${tiny} --trace ${trace} --schedule-only --backend "ref${esc}(31m"
      ERR "unknown attention backend 'ref\\x1B(31m'" NOT_ERR "${esc}")

# serve-sim: the trace is given with --trace; without a GPU it points at --schedule-only.
check(RC 2 ARGS serve-sim ${tiny} ERR "--trace FILE is required")
check(RC 2 ARGS serve-sim ${tiny} ${trace} ERR "--trace FILE is required")
check(RC 0 ARGS serve-sim ${tiny} --trace ${trace} --schedule-only --device-memory 2GiB
      OUT "finished 2 of 2 requests"
          # The constant step time makes modelled figures, and every line with one says so.
          "tokens/s while stepping (modelled: 20.0 ms every step, not measured)"
          "time per output token 20.00 / 20.00 (modelled: 20.0 ms every step, not measured)")
# Times past any sensible run are refused naming the flag (they made reports of inf and nan).
check(RC 2 ARGS serve-sim ${tiny} --trace ${trace} --schedule-only --step-ms 1e300
      ERR "--step-ms: '1e300' is not a number above 0 and at most 3600000 (an hour)")
check(RC 2 ARGS serve-sim ${tiny} --trace ${trace} --schedule-only --time-scale 1e300
      ERR "--time-scale: '1e300' is not a number above 0 and at most 1000")
# A run in which no request finished is an error; an empty trace is told so.
file(WRITE ${WORK_DIR}/too_long.csv "TIMESTAMP,ContextTokens,GeneratedTokens\n"
                                    "2023-11-16 18:17:03.0000000,2000000000,4\n")
check(RC 1 ARGS serve-sim ${tiny} --trace ${WORK_DIR}/too_long.csv --schedule-only
      --device-memory 2GiB OUT "finished 0 of 1 requests" ERR "no request of the 1 finished (1 refused"
      NOT_ERR ".cpp")
file(WRITE ${WORK_DIR}/empty.csv "")
check(RC 1 ARGS serve-sim ${tiny} --trace ${WORK_DIR}/empty.csv --schedule-only
      ERR "empty trace file" NOT_ERR "expected the header")
# Sampling draws tokens on the GPU: not with a schedule alone.
check(RC 2 ARGS serve-sim ${tiny} --trace ${trace} --schedule-only --sample
      ERR "--sample draws tokens on the GPU" "usage: freezeframe serve-sim")
# The cost model times steps that are not run; a file it cannot read is an error.
check(RC 2 ARGS serve-sim ${tiny} --trace ${trace} --cost-model ${WORK_DIR}/bench.json
      ERR "it goes with --schedule-only")
check(RC 1 ARGS serve-sim ${tiny} --trace ${trace} --schedule-only --device-memory 2GiB
      --cost-model ${WORK_DIR}/missing_bench.json ERR "cannot read cost model file" NOT_ERR ".cpp")

# tokenize: a model file and --text; a tokenizer it cannot read is an error.
set(tokenizers ${SOURCE_DIR}/tests/fixtures/tokenizer)
check(RC 2 ARGS tokenize --text hi ERR "no model file given" "usage: freezeframe tokenize")
check(RC 2 ARGS tokenize ${tokenizers}/tiny.gguf ERR "--text TEXT is required")
check(RC 2 ARGS tokenize ${tokenizers}/tiny.gguf ${tokenizers}/tiny.gguf --text hi
      ERR "one model at a time")
check(RC 2 ARGS tokenize ${tokenizers}/tiny.gguf --text ERR "--text needs a value")
check(RC 0 ARGS tokenize ${tokenizers}/tiny/tokenizer.json --text "Hello world"
      OUT "tokenizer: " "pre-tokenizer gpt2" "9 tokens: 44 73 268 83" "'ll'")
check(RC 0 ARGS tokenize ${tokenizers}/tiny.gguf --text "Hi" --chat --special
      OUT "chat format: chatml" "<|im_start|>" "special")
check(RC 1 ARGS tokenize ${tokenizers}/tiny_digits/tokenizer.json --text hi --chat
      ERR "no chat template" NOT_ERR ".cpp")
check(RC 1 ARGS tokenize ${WORK_DIR}/missing.json --text hi ERR "cannot read tokenizer file"
      NOT_ERR ".cpp")
# A FIFO is refused before it is opened (opening it would wait for a writer).
file(REMOVE ${WORK_DIR}/fifo.json)
execute_process(COMMAND mkfifo ${WORK_DIR}/fifo.json)
check(RC 1 ARGS tokenize ${WORK_DIR}/fifo.json --text hi ERR "is a FIFO, not a regular file"
      NOT_ERR ".cpp")
check(RC 1 ARGS tokenize ${tokenizers}/broken/merge_unknown.gguf --text hi
      ERR "tokenizer.ggml.merges[1]" NOT_ERR ".cpp")

# plan with fp8 projections: the bytes they save and the KV capacity they give.
file(READ ${SOURCE_DIR}/configs/llama-3.1-8b.yaml llama_yaml)
string(REPLACE "model:\n" "model:\n  quantization: fp8\n" llama_fp8_yaml "${llama_yaml}")
file(WRITE ${WORK_DIR}/llama-fp8.yaml "${llama_fp8_yaml}")
check(RC 0 ARGS plan ${WORK_DIR}/llama-fp8.yaml --device-memory 141GiB
      OUT "quantization: fp8 projections (per-channel weights, per-token inputs): weights 8.46 GiB, 6.49 GiB less than in bf16; kv capacity +54112 tokens (909744 in bf16)")

# inspect: what a checkpoint holds, whether the engine could run its weights, every tensor read.
set(weights ${SOURCE_DIR}/tests/fixtures/checkpoints/weights)
check(RC 2 ARGS inspect ERR "no checkpoint given" "usage: freezeframe inspect")
check(RC 0 ARGS inspect ${weights}/llama --tensors --verify
      OUT "safetensors: 12 tensors" "model.layers.0.self_attn.q_proj.weight"
          "the model program's 12 weights: all present" "verify: 12 tensors read whole; 0 problems")
check(RC 0 ARGS inspect ${weights}/llama.gguf --verify
      OUT "checkpoint: ${weights}/llama.gguf\n" "GGUF: 12 tensors" "12 weights: all present"
          "0 problems" NOT_OUT "(config ")
check(RC 0 ARGS inspect ${weights}/llama
      OUT "checkpoint: ${weights}/llama (config ${weights}/llama/config.json)")
check(RC 1 ARGS inspect ${weights}/broken/wrong-shape.gguf
      OUT "the engine would not run these weights" "is [64, 32]; the model program expects [32, 32]")
check(RC 1 ARGS inspect ${weights}/broken/q4_k.gguf --tensors
      OUT "Q4_K is not read" "1 tensor is of a type the engine does not read")
check(RC 0 ARGS inspect ${weights}/llama-fp8-channel --tensors --verify
      OUT "quantization: fp8 e4m3 weights, a scale per output channel, activations quantised per token at run time, KV cache scales (compressed-tensors)"
          "F8_E4M3 7" "F8_E4M3 [64, 32] x model.layers.0.self_attn.q_proj.weight_scale"
          "the model program's 12 weights: all present" "0 problems")
check(RC 0 ARGS inspect ${weights}/llama-fp8-block
      OUT "a scale per block of 24 x 8" "12 weights: all present")
check(RC 0 ARGS inspect ${SOURCE_DIR}/tests/fixtures/reference/tiny-deepseek-v2 --verify
      OUT "DeepseekV2ForCausalLM: 3 layers, hidden 64, heads 4/4 of 64"
          "latent attention: kv_lora_rank 64, q_lora_rank 0, head parts 32 + 32 (rope), v 32"
          "experts: 4 of 32, 2 a token, 1 shared, from layer 1 on; weights x 1"
          "rope scaling: YaRN, factor 4 over 32 positions (beta 32/1, mscale 1/0.707)"
          "the model program's 59 weights: all present" "0 problems")
check(RC 1 ARGS inspect ${WORK_DIR}/missing.gguf ERR "cannot read checkpoint" NOT_ERR ".cpp")

# serve, where the tool has it (built with cpp-httplib): its usage and its bad command lines,
# each refused before any model is read, a port bound or a GPU asked for.
execute_process(COMMAND ${FREEZEFRAME} --help OUTPUT_VARIABLE help_text)
if(help_text MATCHES "  serve ")
  set(fixture ${SOURCE_DIR}/tests/fixtures/server/smollm2)
  foreach(help --help -h)
    check(RC 0 ARGS serve ${help} OUT "usage: freezeframe serve" "--token-source hash")
  endforeach()
  check(RC 2 ARGS serve --no-such-option ERR "unknown option '--no-such-option'"
        "usage: freezeframe serve")
  check(RC 2 ARGS serve ERR "no checkpoint or spec given")
  check(RC 2 ARGS serve ${fixture} ${fixture} ERR "one checkpoint at a time")
  check(RC 2 ARGS serve ${fixture} --port 70000 ERR "--port")
  check(RC 2 ARGS serve ${fixture} --token-source gpu ERR "--token-source: 'gpu' is not engine or hash")
  check(RC 2 ARGS serve ${fixture} --api-key ERR "--api-key needs a value")
  check(RC 2 ARGS serve ${fixture} --max-num-seqs 64 --max-num-batched-tokens 8
        ERR "--max-num-batched-tokens must be at least --max-num-seqs")
  check(RC 2 ARGS serve ${spec} --max-num-seqs 4 ERR "a spec says them itself")
  check(RC 2 ARGS serve ${spec} --quantization fp8 ERR "a spec says them itself")
  check(RC 2 ARGS serve ${fixture} --quantization int4 ERR "--quantization: 'int4' is not none or fp8")
  check(RC 2 ARGS serve ${fixture} --tokenizer x.json ERR "--tokenizer is for a spec")
  check(RC 2 ARGS serve ${fixture} --token-source hash --max-model-len 100000
        ERR "--max-model-len 100000 is past the model's 8192 positions")
  check(RC 1 ARGS serve ${spec} --token-source hash ERR "names no checkpoint" "--tokenizer FILE"
        NOT_ERR ".cpp")
  check(RC 1 ARGS serve ${WORK_DIR}/missing.gguf ERR "cannot read checkpoint" NOT_ERR ".cpp")
endif()

# Without a GPU (demo says so), the GPU commands refuse with the probe's reason, cleanly.
execute_process(COMMAND ${FREEZEFRAME} demo RESULT_VARIABLE rc OUTPUT_VARIABLE out)
if(out MATCHES "no GPU: ([^\n]*)")
  set(reason "${CMAKE_MATCH_1}")
  message(STATUS "no GPU here: ${reason}")
  check(RC 0 ARGS demo OUT "ran the host reference only")
  check(RC 1 ARGS serve-sim ${tiny} --trace ${trace} --device-memory 2GiB
        ERR "no GPU" "--schedule-only" "${reason}" NOT_ERR ".cpp")
  foreach(command capture bench)
    check(RC 1 ARGS ${command} ${tiny} ERR "freezeframe ${command}: unsupported: ${reason}"
          NOT_ERR ".cpp")
  endforeach()
endif()
