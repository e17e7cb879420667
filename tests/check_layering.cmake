# Fails when a file includes a header of a layer above its own (docs/architecture.md): core, then
# codecs, then serving, then the components (http, grpc, cuda, and xtensor, the header-only
# interop), none of which includes another's.
# A source's layer is its folder under src/; a private header is named by its path under src/
# ("codecs/detail/json_read.hpp"); a public header's layer is listed below.
# Run with -DSOURCE_DIR=<repository root>.

cmake_minimum_required(VERSION 3.25)

set(core_headers
  buffer cancellation chat_message datatype device_memory elementwise export float16 infer limits log_settings metadata
  model_config parameters shape statistics status tensor trace_settings version)
set(codecs_headers binary generate json)
set(serving_headers
  access classification client_options executor http_client_protocol http_handler in_process_client
  inference_service log memory_budget metrics model oip openai reply_sink repository sequence shared_memory
  trace)
set(layers core codecs serving http grpc cuda xtensor)

# The layer's rank: the components share the top rank.
function(rank_of layer out)
  list(FIND layers "${layer}" index)
  if(index GREATER 3)
    set(index 3)
  endif()
  set(${out} ${index} PARENT_SCOPE)
endfunction()

# The layer of an included path, or "" for a header outside oip (the standard library, a
# dependency).
function(layer_of_include path out)
  set(layer "")
  if(path MATCHES "^oip/(http|grpc|cuda)/")
    set(layer "${CMAKE_MATCH_1}")
  elseif(path STREQUAL "oip/xtensor.hpp")
    set(layer "xtensor")
  elseif(path MATCHES "^oip/([a-z0-9_]+)\\.hpp$")
    set(name "${CMAKE_MATCH_1}")
    foreach(candidate core codecs serving)
      if(name IN_LIST ${candidate}_headers)
        set(layer "${candidate}")
      endif()
    endforeach()
    if(layer STREQUAL "")
      set(layer "unlisted")
    endif()
  elseif(path MATCHES "^(core|codecs|serving|http|grpc|cuda)/")
    set(layer "${CMAKE_MATCH_1}")
  endif()
  set(${out} "${layer}" PARENT_SCOPE)
endfunction()

set(offenders "")
set(checked 0)
# Every file with the layer it belongs to.
file(GLOB public_headers "${SOURCE_DIR}/include/oip/*.hpp")
file(GLOB component_headers "${SOURCE_DIR}/include/oip/*/*.hpp")
file(GLOB_RECURSE sources "${SOURCE_DIR}/src/*.cpp" "${SOURCE_DIR}/src/*.hpp" "${SOURCE_DIR}/src/*.cu")
foreach(file IN LISTS public_headers component_headers sources)
  file(RELATIVE_PATH relative "${SOURCE_DIR}" "${file}")
  if(relative MATCHES "^include/(oip/.*)$")
    layer_of_include("${CMAKE_MATCH_1}" own)
  elseif(relative MATCHES "^src/([a-z]+)/")
    set(own "${CMAKE_MATCH_1}")
  else()
    set(own "misplaced")
  endif()
  if(NOT own IN_LIST layers)
    list(APPEND offenders "${relative}: not in a layer (${own})")
    continue()
  endif()
  rank_of("${own}" own_rank)
  math(EXPR checked "${checked} + 1")
  file(STRINGS "${file}" includes REGEX "^[ \t]*#[ \t]*include[ \t]*[<\"]")
  foreach(line IN LISTS includes)
    string(REGEX REPLACE "^[ \t]*#[ \t]*include[ \t]*[<\"]([^>\"]+)[>\"].*$" "\\1" path "${line}")
    layer_of_include("${path}" layer)
    if(layer STREQUAL "")
      continue()
    endif()
    if(layer STREQUAL "unlisted")
      list(APPEND offenders "${relative}: includes ${path}, which tests/check_layering.cmake does not place in a layer")
      continue()
    endif()
    rank_of("${layer}" rank)
    if(rank GREATER own_rank OR (rank EQUAL 3 AND NOT layer STREQUAL own))
      list(APPEND offenders "${relative} (${own}) includes ${path} (${layer})")
    endif()
  endforeach()
endforeach()

if(checked LESS 50)
  message(FATAL_ERROR "only ${checked} files found under ${SOURCE_DIR}: is SOURCE_DIR the repository root?")
endif()
if(offenders)
  list(JOIN offenders "\n  " listed)
  message(FATAL_ERROR "files include a layer above their own:\n  ${listed}")
endif()
message(STATUS "${checked} files checked: each includes its own layer and those below only")
