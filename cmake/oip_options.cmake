# Build options and helpers shared by every oip target.

set(CMAKE_CXX_EXTENSIONS OFF)

option(BUILD_SHARED_LIBS "Build oip as a shared library" OFF)
option(OIP_BUILD_TESTS "Build the tests" ${PROJECT_IS_TOP_LEVEL})
option(OIP_BUILD_BENCHMARKS "Build the benchmarks (needs Google Benchmark)" ${PROJECT_IS_TOP_LEVEL})
option(OIP_BUILD_EXAMPLES "Build the examples" ${PROJECT_IS_TOP_LEVEL})
option(OIP_BUILD_FUZZERS "Build the libFuzzer targets (clang, with the fuzz preset)" OFF)
option(OIP_INSTALL "Generate the install rules and package files" ON)
option(OIP_WARNINGS_AS_ERRORS "Treat compiler warnings as errors" OFF)
option(OIP_WITH_XTENSOR "Build the oip::xtensor component when xtensor is found" ON)
option(OIP_WITH_HTTP "Build the oip::http component (Boost.Beast) when Boost 1.81 is found" ON)
option(OIP_WITH_GRPC "Build the oip::grpc component when grpc++ and protobuf are found" ON)
option(OIP_WITH_CUDA "Build the oip::cuda component when the CUDA toolkit (nvcc) is found" ON)
option(OIP_REQUIRE_ALL_COMPONENTS "Fail when a component's dependency is missing" OFF)

# -Wall -Wextra -Wpedantic on a target of ours (never on dependencies).
function(oip_set_warnings target)
  target_compile_options(${target} PRIVATE -Wall -Wextra -Wpedantic -Wshadow -Wconversion
    -Wno-sign-conversion $<$<BOOL:${OIP_WARNINGS_AS_ERRORS}>:-Werror>)
endfunction()

# Report a component that cannot be built here; an error when every component is required.
function(oip_component_missing component reason)
  if(OIP_REQUIRE_ALL_COMPONENTS)
    message(FATAL_ERROR "oip: component '${component}' cannot be built: ${reason}")
  endif()
  message(STATUS "oip: component '${component}' skipped: ${reason}")
endfunction()
