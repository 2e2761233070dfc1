"""Streams one chat completion through tokenmeter with the official OpenAI Python SDK.

Prints one JSON line: the text received, the number of chunks with content, and the usage the SDK
saw (only when asked for). Exits non-zero on any SDK error. Used by tests/e2e/real_clients.rs and
tests/e2e/tls_server.rs (`--ca`: an https:// base URL verified with a test CA).
"""
import argparse
import json
import ssl
import sys

import openai


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--base-url", required=True)
    parser.add_argument("--max-tokens", type=int, default=12)
    parser.add_argument("--usage", action="store_true", help="ask for include_usage")
    parser.add_argument("--ca", help="PEM CA bundle to verify an https:// base URL with")
    args = parser.parse_args()

    options = {}
    if args.ca:
        # The SDK's own HTTP client, told to trust the test CA (and nothing else).
        options["http_client"] = openai.DefaultHttpxClient(verify=ssl.create_default_context(cafile=args.ca))
    client = openai.OpenAI(base_url=args.base_url, api_key="sk-test-not-a-secret", **options)
    kwargs = {}
    if args.usage:
        kwargs["stream_options"] = {"include_usage": True}
    stream = client.chat.completions.create(
        model="meta-llama/Llama-3.1-8B-Instruct",
        messages=[{"role": "user", "content": "Say something."}],
        max_tokens=args.max_tokens,
        stream=True,
        **kwargs,
    )
    text = []
    content_chunks = 0
    usage = None
    chunks = 0
    for chunk in stream:
        chunks += 1
        if chunk.usage is not None:
            usage = {
                "prompt_tokens": chunk.usage.prompt_tokens,
                "completion_tokens": chunk.usage.completion_tokens,
            }
        for choice in chunk.choices:
            if choice.delta.content:
                content_chunks += 1
                text.append(choice.delta.content)
    print(json.dumps({"text": "".join(text), "content_chunks": content_chunks, "chunks": chunks, "usage": usage}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
