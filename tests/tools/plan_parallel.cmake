# freezeframe plan on a deployment of T = 2 ranks with DCP over D = 2 of them (DeepSeek-V2-Lite:
# its one MLA latent is replicated on every rank, so DCP may span them all): the deployment is
# shown, the regions are one rank's (half the T = 1 weights, give or take the replicated norms
# and MLA compressions), and the KV capacity is blocks x block_size x D, in the text and the JSON.
# Usage: cmake -DFREEZEFRAME=<tool> -DSOURCE_DIR=<checkout> -DWORK_DIR=<scratch>
#              -P plan_parallel.cmake

file(MAKE_DIRECTORY ${WORK_DIR})
file(READ ${SOURCE_DIR}/configs/deepseek-v2-lite.yaml config)
set(spec ${WORK_DIR}/deepseek-v2-lite-tp2-dcp2.yaml)
file(WRITE ${spec} "${config}tp:\n  world_size: 2\ndcp:\n  world_size: 2\n  interleave_size: 4\n")

function(plan spec json)
  execute_process(COMMAND ${FREEZEFRAME} plan ${spec} --device-memory 80GiB --json ${json}
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "freezeframe plan ${spec}: exit ${rc}\n${err}")
  endif()
  set(out "${out}" PARENT_SCOPE)
endfunction()

function(expect_in text what)
  string(FIND "${text}" "${what}" at)
  if(at EQUAL -1)
    message(FATAL_ERROR "the output lacks '${what}':\n${text}")
  endif()
endfunction()

plan(${SOURCE_DIR}/configs/deepseek-v2-lite.yaml ${WORK_DIR}/one.json)
file(READ ${WORK_DIR}/one.json one)
plan(${spec} ${WORK_DIR}/two.json)
file(READ ${WORK_DIR}/two.json two)

expect_in("${out}" "deployment: tp 2, dcp 2 (interleave 4): 2 GPU ranks; the plan below is one rank's, the same on every rank")
expect_in("${out}" "region (per rank)")

string(JSON tp GET "${two}" deployment tp_world_size)
string(JSON dcp GET "${two}" deployment dcp_world_size)
string(JSON interleave GET "${two}" deployment dcp_interleave_size)
string(JSON ranks GET "${two}" deployment ranks)
if(NOT (tp EQUAL 2 AND dcp EQUAL 2 AND interleave EQUAL 4 AND ranks EQUAL 2))
  message(FATAL_ERROR "deployment in the JSON: tp ${tp}, dcp ${dcp}, interleave ${interleave}, "
                      "ranks ${ranks}")
endif()

# The deployment's KV capacity: every block id names 16 x 2 positions over the DCP group.
string(JSON blocks GET "${two}" kv_cache num_blocks)
string(JSON tokens GET "${two}" kv_cache deployment_tokens)
math(EXPR expected "${blocks} * 16 * 2")
if(NOT tokens EQUAL expected)
  message(FATAL_ERROR "deployment_tokens ${tokens}, expected ${blocks} x 16 x 2 = ${expected}")
endif()
expect_in("${out}" "kv capacity: ${tokens} tokens in the deployment (${blocks} blocks x 16 tokens x dcp 2)")

# One rank's weights: the sharded ones halve, the replicated ones (norms, q/kv compressions)
# stay, so a rank holds more than half and less than all.
string(JSON w1 GET "${one}" regions 0 bytes)
string(JSON w2 GET "${two}" regions 0 bytes)
string(JSON r1 GET "${one}" regions 0 name)
math(EXPR half "${w1} / 2")
if(NOT r1 STREQUAL "weights" OR NOT w2 GREATER half OR NOT w2 LESS w1)
  message(FATAL_ERROR "weights per rank ${w2} at T = 2 against ${w1} at T = 1")
endif()
