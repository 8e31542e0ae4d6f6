# freezeframe_add_library(<folder> SOURCES ... DEPS ...)
# Declares the library of one top-level folder: target freezeframe_<folder>, alias
# freezeframe::<folder>, public headers under <folder>/include, installed and exported.
# Each carries C++20 as a usage requirement: the public headers need it, and a project that
# links the library without setting CMAKE_CXX_STANDARD must still compile them.
function(freezeframe_add_library folder)
  cmake_parse_arguments(ARG "" "" "SOURCES;DEPS;PRIVATE_DEPS" ${ARGN})
  set(target freezeframe_${folder})
  add_library(${target} STATIC ${ARG_SOURCES})
  add_library(freezeframe::${folder} ALIAS ${target})
  set_target_properties(${target} PROPERTIES EXPORT_NAME ${folder} CUDA_RUNTIME_LIBRARY Shared)
  target_include_directories(${target} PUBLIC
    $<BUILD_INTERFACE:${CMAKE_CURRENT_SOURCE_DIR}/include>
    $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>)
  target_link_libraries(${target} PUBLIC ${ARG_DEPS} PRIVATE freezeframe_build_options ${ARG_PRIVATE_DEPS})
  target_compile_features(${target} PUBLIC cxx_std_20)
  # The same for users' CUDA sources that include the headers. CMake before 3.26 does not know
  # that nvcc 12+ takes C++20 (see the top-level CMakeLists.txt) and refuses the feature.
  if("cuda_std_20" IN_LIST CMAKE_CUDA_COMPILE_FEATURES)
    target_compile_features(${target} PUBLIC cuda_std_20)
  endif()
  install(TARGETS ${target} EXPORT freezeframe-targets
    ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR})
  install(DIRECTORY include/ DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
endfunction()
