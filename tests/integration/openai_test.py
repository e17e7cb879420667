#!/usr/bin/env python3
"""The OpenAI-compatible front end against oip-serve (--openai true), through OpenAI's own Python
package, unchanged: models listed and retrieved, completions and chat completions with and
without stream=True (chunks read as they arrive), stop strings, max_tokens, usage, embeddings
(floats and the SDK's default base64), a second mapping (text_upper: other names, max_tokens as
an input, one response), errors in OpenAI's shape (unknown model, bad key, malformed body, what
the front end does not offer), and a stream closed by the client, which stops the model.

Usage: openai_test.py PATH/TO/oip-serve
"""

import json
import math
import socket
import sys
import time

import httpx
import openai

import oip_serve_runner

KEY = "sk-oip-test"
checks = []


def check(function):
    checks.append(function)
    return function


class Clients:
    def __init__(self, http_url, grpc_url):
        self.http_url = http_url
        self.openai = openai.OpenAI(base_url=f"http://{http_url}/v1", api_key=KEY, max_retries=0)

    def close(self):
        self.openai.close()


def text_embed(text):
    """text_embed's vector: byte i adds its value / 255 to element i mod 8, then length 1."""
    v = [0.0] * 8
    for i, b in enumerate(text.encode()):
        v[i % 8] += b / 255
    length = math.sqrt(sum(x * x for x in v))
    return [x / length for x in v] if length else v


def stats(clients, model):
    reply = httpx.get(f"http://{clients.http_url}/v2/models/{model}/stats").json()
    return reply["model_stats"][0]


def expect_error(kind, status, call):
    try:
        call()
    except kind as e:
        assert e.status_code == status, (e.status_code, e)
        return e
    raise AssertionError(f"no {kind.__name__}")


@check
def models_are_listed_and_retrieved(clients):
    ids = sorted(m.id for m in clients.openai.models.list())
    assert ids == ["text_embed", "text_stream", "text_upper"], ids
    model = clients.openai.models.retrieve("text_upper")
    assert model.id == "text_upper" and model.object == "model" and model.owned_by == "oip"
    e = expect_error(openai.NotFoundError, 404, lambda: clients.openai.models.retrieve("nope"))
    assert e.code == "model_not_found", e.body


@check
def completion_with_max_tokens_and_usage(clients):
    before = stats(clients, "text_stream")["inference_stats"]["success"]["count"]
    c = clients.openai.completions.create(model="text_stream", prompt="the quick brown fox",
                                          max_tokens=2)
    assert c.object == "text_completion" and c.id.startswith("cmpl-"), c
    assert c.choices[0].text == "the quick", c
    assert c.choices[0].finish_reason == "length", c
    assert (c.usage.prompt_tokens, c.usage.completion_tokens, c.usage.total_tokens) == (4, 2, 6)
    whole = clients.openai.completions.create(model="text_stream", prompt="the quick brown fox")
    assert whole.choices[0].text == "the quick brown fox"
    assert whole.choices[0].finish_reason == "stop"
    # Counted under the model, as any other request.
    after = stats(clients, "text_stream")["inference_stats"]["success"]["count"]
    assert after == before + 2, (before, after)


@check
def streamed_completion_arrives_chunk_by_chunk(clients):
    prompt = "one two three four five"
    stream = clients.openai.completions.create(
        model="text_stream", prompt=prompt, stream=True,
        stream_options={"include_usage": True}, extra_body={"delay_ms": 150})
    texts, arrivals, finish, usage = [], [], None, None
    start = time.monotonic()
    for chunk in stream:
        if chunk.usage is not None:
            usage = chunk.usage
        if chunk.choices:
            arrivals.append(time.monotonic() - start)
            texts.append(chunk.choices[0].text)
            finish = chunk.choices[0].finish_reason or finish
    assert "".join(texts) == prompt, texts
    assert finish == "stop"
    assert usage is not None and usage.completion_tokens == 5 and usage.prompt_tokens == 5, usage
    # Five words 150 ms apart: the first ones came long before the last.
    assert arrivals[-1] - arrivals[0] > 0.4, arrivals


@check
def chat_completion_plain_and_streamed(clients):
    messages = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi there"}]
    chat = clients.openai.chat.completions.create(model="text_stream", messages=messages)
    assert chat.object == "chat.completion" and chat.id.startswith("chatcmpl-"), chat
    message = chat.choices[0].message
    assert message.role == "assistant"
    # text_stream echoes its prompt: the default template's.
    assert message.content == "system: be brief\nuser: hi there\nassistant:", message.content
    assert chat.usage.total_tokens == chat.usage.prompt_tokens + chat.usage.completion_tokens
    stream = clients.openai.chat.completions.create(model="text_stream", messages=messages,
                                                    stream=True, max_completion_tokens=3)
    chunks = list(stream)
    assert chunks[0].choices[0].delta.role == "assistant", chunks[0]
    content = "".join(c.choices[0].delta.content or "" for c in chunks)
    assert content == "system: be brief", content
    assert chunks[-1].choices[0].finish_reason == "length", chunks[-1]
    assert all(c.object == "chat.completion.chunk" for c in chunks)


@check
def stop_strings_cut_the_text(clients):
    c = clients.openai.completions.create(model="text_stream", prompt="alpha beta gamma delta",
                                          stop=[" gam", "zzz"])
    assert c.choices[0].text == "alpha beta", c
    assert c.choices[0].finish_reason == "stop"
    # Streamed, the stop string spans two responses (" ga" would not do): still cut before it.
    stream = clients.openai.completions.create(model="text_stream", prompt="alpha beta gamma delta",
                                               stop="a gamma", stream=True)
    text = "".join(chunk.choices[0].text for chunk in stream if chunk.choices)
    assert text == "alpha bet", text


@check
def second_mapping_answers_once(clients):
    c = clients.openai.completions.create(model="text_upper", prompt="make me loud please",
                                          max_tokens=3)
    assert c.choices[0].text == "MAKE ME LOUD", c
    assert c.choices[0].finish_reason == "length"
    assert c.usage.completion_tokens == 3
    # max_tokens left out: the mapping's default (16) goes to the input.
    c = clients.openai.completions.create(model="text_upper", prompt="quiet")
    assert c.choices[0].text == "QUIET"
    chunks = list(clients.openai.chat.completions.create(
        model="text_upper", messages=[{"role": "user", "content": "shout"}], stream=True))
    content = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert content == "USER: SHOUT\nASSISTANT:", content


@check
def embeddings_as_floats_and_base64(clients):
    texts = ["abc", "hello world", ""]
    floats = clients.openai.embeddings.create(model="text_embed", input=texts,
                                              encoding_format="float")
    assert [d.index for d in floats.data] == [0, 1, 2]
    for d, text in zip(floats.data, texts):
        assert all(abs(a - b) < 1e-6 for a, b in zip(d.embedding, text_embed(text))), (text, d)
    assert floats.usage.prompt_tokens == 3  # one word, two words, none
    # The SDK asks for base64 unless told otherwise, and decodes it: the same float32 values
    # (the JSON numbers are their shortest decimal forms, read back as doubles).
    default = clients.openai.embeddings.create(model="text_embed", input="abc")
    assert len(default.data[0].embedding) == 8
    assert all(abs(a - b) < 1e-7 for a, b in zip(default.data[0].embedding,
                                                 floats.data[0].embedding)), default


@check
def errors_in_openai_shape(clients):
    e = expect_error(openai.NotFoundError, 404, lambda: clients.openai.completions.create(
        model="no_such_model", prompt="x"))
    assert e.code == "model_not_found" and e.type == "not_found_error", e.body
    wrong_key = openai.OpenAI(base_url=f"http://{clients.http_url}/v1", api_key="sk-wrong",
                              max_retries=0)
    e = expect_error(openai.AuthenticationError, 401, lambda: wrong_key.models.list())
    assert e.code == "invalid_api_key", e.body
    wrong_key.close()
    expect_error(openai.BadRequestError, 400, lambda: clients.openai.completions.create(
        model="text_stream", prompt="x", n=2))
    expect_error(openai.BadRequestError, 400, lambda: clients.openai.chat.completions.create(
        model="text_stream", messages=[{"role": "user", "content": [
            {"type": "image_url", "image_url": {"url": "http://x/y.png"}}]}]))
    expect_error(openai.NotFoundError, 404, lambda: clients.openai.embeddings.create(
        model="text_stream", input="x"))
    # A malformed body: the SDK cannot send one, so httpx does.
    reply = httpx.post(f"http://{clients.http_url}/v1/chat/completions",
                       headers={"Authorization": f"Bearer {KEY}"}, content=b'{"model": "text_')
    assert reply.status_code == 400, reply.text
    assert reply.json()["error"]["type"] == "invalid_request_error", reply.text
    # Refused by the HTTP server itself, before the handler reads the body: OpenAI's shape too.
    host, port = clients.http_url.split(":")
    with socket.create_connection((host, int(port)), timeout=10) as raw:
        raw.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n"
                    b"Content-Length: 999999999999\r\n\r\n")
        reply = b""
        while b"\r\n\r\n" not in reply or not reply.rstrip().endswith(b"}"):
            chunk = raw.recv(65536)
            if not chunk:
                break
            reply += chunk
    head, _, body = reply.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 413"), head
    assert json.loads(body)["error"]["type"] == "invalid_request_error", body
    # No key at all.
    reply = httpx.get(f"http://{clients.http_url}/v1/models")
    assert reply.status_code == 401 and "API key" in reply.json()["error"]["message"], reply.text


@check
def closing_a_stream_stops_the_model(clients):
    before = stats(clients, "text_stream")["inference_stats"]
    words = " ".join(f"w{i}" for i in range(20))
    stream = clients.openai.completions.create(model="text_stream", prompt=words, stream=True,
                                               extra_body={"delay_ms": 200})
    first = next(iter(stream))
    assert first.choices[0].text == "w0", first
    stream.close()
    deadline = time.monotonic() + 5
    while True:
        after = stats(clients, "text_stream")["inference_stats"]
        ended = after["fail"]["count"] - before["fail"]["count"]
        if ended == 1 or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    # The model stopped within a delay or two, not after twenty words (four seconds).
    assert ended == 1, after
    assert after["success"]["count"] == before["success"]["count"], after


def main():
    return oip_serve_runner.run(sys.argv[1], checks, Clients,
                                extra_args=("--openai", "true", "--openai-api-key", KEY))


if __name__ == "__main__":
    sys.exit(main())
