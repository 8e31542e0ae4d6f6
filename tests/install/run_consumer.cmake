# Installs the build tree into a scratch prefix, then configures, builds and runs a tiny
# outside project that finds it with find_package(freezeframe).
file(REMOVE_RECURSE ${WORK_DIR})
execute_process(COMMAND ${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${WORK_DIR}/prefix
                RESULT_VARIABLE rc)
if(rc)
  message(FATAL_ERROR "install failed (${rc})")
endif()
execute_process(COMMAND ${CMAKE_COMMAND} -S ${SOURCE_DIR}/tests/install/consumer
                  -B ${WORK_DIR}/build -G ${GENERATOR}
                  -DCMAKE_PREFIX_PATH=${WORK_DIR}/prefix
                  -DCMAKE_CUDA_ARCHITECTURES=${CUDA_ARCHITECTURES}
                RESULT_VARIABLE rc)
if(rc)
  message(FATAL_ERROR "configuring the consumer failed (${rc})")
endif()
execute_process(COMMAND ${CMAKE_COMMAND} --build ${WORK_DIR}/build RESULT_VARIABLE rc)
if(rc)
  message(FATAL_ERROR "building the consumer failed (${rc})")
endif()
execute_process(COMMAND ${WORK_DIR}/build/consumer OUTPUT_VARIABLE out RESULT_VARIABLE rc)
message(STATUS "consumer printed: ${out}")
if(rc OR NOT out MATCHES "reference")
  message(FATAL_ERROR "the consumer did not list the reference backend (${rc})")
endif()

# The examples folder is a project of its own too: built as a user who copied it would.
execute_process(COMMAND ${CMAKE_COMMAND} -S ${SOURCE_DIR}/examples -B ${WORK_DIR}/examples
                  -G ${GENERATOR} -DCMAKE_PREFIX_PATH=${WORK_DIR}/prefix
                RESULT_VARIABLE rc)
if(rc)
  message(FATAL_ERROR "configuring the examples against the installed tree failed (${rc})")
endif()
execute_process(COMMAND ${CMAKE_COMMAND} --build ${WORK_DIR}/examples RESULT_VARIABLE rc)
if(rc)
  message(FATAL_ERROR "building the examples against the installed tree failed (${rc})")
endif()
# No path of this machine's NCCL in the installed targets: the package finds it where it is.
file(GLOB targets ${WORK_DIR}/prefix/lib*/cmake/freezeframe/freezeframe-targets*.cmake)
foreach(file ${targets})
  file(READ ${file} text)
  if(text MATCHES "libnccl")
    message(FATAL_ERROR "${file} names a libnccl path")
  endif()
endforeach()
