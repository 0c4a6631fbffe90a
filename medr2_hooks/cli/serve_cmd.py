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
    parser.add_argument("--port", type=_count(0, 65535), default=8000, help="TCP port (0-65535; default 8000)")
    parser.add_argument("--batch_size", "--batch-size", dest="batch_size", type=_count(1), default=8,
                        help="prompts per forward pass (>= 1)")
    parser.add_argument("--max_batch", "--max-batch", dest="max_batch", type=_count(1), default=64,
                        help="prompts merged across concurrent requests (>= 1)")
    parser.add_argument("--max_tokens", "--max-tokens", dest="max_tokens", type=_count(1), default=2048,
                        help="the most tokens a request may generate per prompt (default 2048)")
    parser.add_argument("--max_prompts", "--max-prompts", dest="max_prompts", type=_count(1), default=256,
                        help="the most prompts in one request (default 256)")
    parser.add_argument("--max_body_mb", "--max-body-mb", dest="max_body_mb", type=_count(1), default=16,
                        help="the largest request body in MiB (default 16)")
    parser.add_argument("--api_key_env", "--api-key-env", dest="api_key_env", metavar="VAR",
                        help="require `Authorization: Bearer <key>` with the key in this environment variable (as "
                        "vllm serve --api-key does; a key on the command line would show in `ps`)")
    parser.add_argument("--dtype", default="float32")


def _count(low: int, high: int | None = None):
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a whole number, found {text!r}") from None
        if value < low or (high is not None and value > high):
            raise argparse.ArgumentTypeError(f"must be >= {low}{f' and <= {high}' if high is not None else ''}, "
                                             f"found {value}")
        return value
    return parse


def run(args: argparse.Namespace) -> int:
    import os
    import signal
    import threading

    from ..errors import Medr2Error
    from ..llm.hf import HFBackend
    from ..llm.local import check_model_folder
    from ..llm.serve import check_port, make_server
    from ..llm.serve_protocol import Limits

    key = None
    if args.api_key_env:
        key = os.environ.get(args.api_key_env)
        if not key:
            raise Medr2Error(f"--api_key_env {args.api_key_env}: the variable is not set")
    # mistakes found before the model loads (a load takes seconds to minutes)
    check_port(args.host, args.port)
    check_model_folder(args.model)
    try:
        backend = HFBackend(args.model, dtype=args.dtype, batch_size=args.batch_size)
    except OSError as exc:  # transformers: no such hub id offline, a folder without weights
        raise Medr2Error(f"--model {args.model}: cannot be loaded ({str(exc).splitlines()[0]})") from None
    server = make_server(backend, args.name or args.model, args.host, args.port, args.max_batch,
                         limits=Limits(max_tokens=args.max_tokens, max_prompts=args.max_prompts), api_key=key,
                         max_body=args.max_body_mb * 1024 * 1024)
    # SIGTERM: stop accepting, let the requests in flight finish, then exit
    signal.signal(signal.SIGTERM, lambda *_: threading.Thread(target=server.shutdown, daemon=True).start())
    print(f"serving {args.model} at http://{args.host}:{server.server_address[1]}/v1 (Ctrl-C stops)", flush=True)
    try:
        server.serve_forever()
        if not server.drain():
            print("medr2 serve: requests still in flight after 600 s; exiting", flush=True)
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0
