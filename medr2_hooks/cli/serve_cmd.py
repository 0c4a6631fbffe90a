"""``medr2 serve``: an OpenAI-compatible completions server over a local model (a CPU stand-in for vllm serve)."""

from __future__ import annotations

import argparse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.epilog = (
        "examples:\n"
        "  medr2 serve --model embedded:smollm2-135m-instruct --port 8001 &\n"
        "  medr2 eval --tasks medqa_usmle_medr2 --metadata '{\"method_override\": {\"llm\": {\"backend\": \"openai\",\n"
        "      \"model\": \"smollm2\", \"base_url\": \"http://127.0.0.1:8001/v1\"}}}'\n"
        "On GPUs serve the paper's models with `vllm serve <hub id> --port ...` instead: the same protocol."
    )
    parser.add_argument("--model", default="embedded:gemma-270m", help="embedded: name, local folder or hub id")
    parser.add_argument("--name", help="the model name clients send (default: --model)")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--batch-size", type=int, default=8, help="prompts per forward pass")
    parser.add_argument("--max-batch", type=int, default=64, help="prompts merged across concurrent requests")
    parser.add_argument("--dtype", default="float32")


def run(args: argparse.Namespace) -> int:
    from ..llm.hf import HFBackend
    from ..llm.serve import make_server

    backend = HFBackend(args.model, dtype=args.dtype, batch_size=args.batch_size)
    server = make_server(backend, args.name or args.model, args.host, args.port, args.max_batch)
    print(f"serving {args.model} at http://{args.host}:{server.server_address[1]}/v1 (Ctrl-C stops)", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0
