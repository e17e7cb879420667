#pragma once
/// \file
/// Everything of the oip library itself in one include: the core types, the protocol objects, the
/// codecs and the serving layer. The components have their own headers (`oip/http/server.hpp`,
/// `oip/grpc/server.hpp`, `oip/cuda/...`, `oip/xtensor.hpp`), each with its dependencies.
///
/// Example:
/// \code
///   #include <oip/oip.hpp>
///
///   oip::model_repository models;
///   oip::executor workers;
///   oip::http_handler handler{models, workers};
/// \endcode

#include <oip/access.hpp>
#include <oip/binary.hpp>
#include <oip/buffer.hpp>
#include <oip/cancellation.hpp>
#include <oip/chat_message.hpp>
#include <oip/classification.hpp>
#include <oip/client_options.hpp>
#include <oip/datatype.hpp>
#include <oip/elementwise.hpp>
#include <oip/executor.hpp>
#include <oip/float16.hpp>
#include <oip/generate.hpp>
#include <oip/http_client_protocol.hpp>
#include <oip/http_handler.hpp>
#include <oip/in_process_client.hpp>
#include <oip/infer.hpp>
#include <oip/inference_service.hpp>
#include <oip/json.hpp>
#include <oip/limits.hpp>
#include <oip/log.hpp>
#include <oip/log_settings.hpp>
#include <oip/memory_budget.hpp>
#include <oip/metadata.hpp>
#include <oip/metrics.hpp>
#include <oip/model.hpp>
#include <oip/model_config.hpp>
#include <oip/openai.hpp>
#include <oip/parameters.hpp>
#include <oip/reply_sink.hpp>
#include <oip/repository.hpp>
#include <oip/sequence.hpp>
#include <oip/shape.hpp>
#include <oip/shared_memory.hpp>
#include <oip/statistics.hpp>
#include <oip/status.hpp>
#include <oip/tensor.hpp>
#include <oip/trace.hpp>
#include <oip/trace_settings.hpp>
#include <oip/version.hpp>
