"""Search-R1 compatible retrieval server over the embedded BM25 index (standard library only).

    python -m seed_jax.envs.search.server --corpus corpus.jsonl --port 8000 [--host 127.0.0.1] [--topk 3]
        [--backlog 4096] [--workers 32]

``POST /retrieve`` accepts ``{"queries": [str, ...]}`` (Search-R1's retrieval_server.py) or
``{"query": str}``, plus optional ``"topk"`` (int, default --topk) and ``"return_scores"``
(bool, default false), and answers ``{"result": [[entry, ...], ...]}`` with one list per
query, where entry is ``{"document": {"id", "contents"}, "score": float}`` when
return_scores is true and the bare document otherwise (as Search-R1 does). Bad requests get
HTTP 400 ``{"error": "..."}``. ``GET /health`` answers ``{"status": "ok", "num_docs": N}``.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer

from seed_jax.envs.search.data import default_corpus_path
from seed_jax.envs.search.retriever import BM25Retriever, Retriever

DEFAULT_BACKLOG = 4096
DEFAULT_WORKERS = 32
MAX_BODY_BYTES = 16 << 20
MAX_TOPK = 1000
MAX_QUERIES = 4096


class RequestError(ValueError):
    """A request body that does not follow the API."""


def parse_request(body: bytes, default_topk: int) -> tuple[list[str], int, bool]:
    """Validate a /retrieve body; returns (queries, topk, return_scores)."""
    try:
        req = json.loads(body)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise RequestError(f"body is not JSON: {e}") from e
    if not isinstance(req, dict):
        raise RequestError("body must be a JSON object")
    if "queries" in req:
        queries = req["queries"]
        if not isinstance(queries, list) or not all(isinstance(q, str) for q in queries):
            raise RequestError('"queries" must be a list of strings')
    elif "query" in req:
        if not isinstance(req["query"], str):
            raise RequestError('"query" must be a string')
        queries = [req["query"]]
    else:
        raise RequestError('body needs "query" (str) or "queries" (list of str)')
    if len(queries) > MAX_QUERIES:
        raise RequestError(f"at most {MAX_QUERIES} queries per request, got {len(queries)}")
    topk = req.get("topk") or default_topk  # Search-R1: missing/null/0 -> server default
    if not isinstance(topk, int) or isinstance(topk, bool) or not 1 <= topk <= MAX_TOPK:
        raise RequestError(f'"topk" must be an int in [1, {MAX_TOPK}], got {req.get("topk")!r}')
    return_scores = req.get("return_scores", False)
    if not isinstance(return_scores, bool):
        raise RequestError('"return_scores" must be a boolean')
    return queries, topk, return_scores


def retrieve_response(retriever: Retriever, queries: list[str], topk: int, return_scores: bool) -> dict:
    """The response object of /retrieve for already validated arguments."""
    result = []
    for passages in retriever.search(queries, topk) if queries else []:
        if return_scores:
            result.append([{"document": p.document(), "score": float(p.score)} for p in passages])
        else:
            result.append([p.document() for p in passages])
    return {"result": result}


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: RetrievalHTTPServer

    def setup(self):
        self.timeout = self.server.idle_timeout  # socket timeout: an idle keep-alive connection ends
        super().setup()

    def _send(self, code: int, obj: dict) -> None:
        data = json.dumps(obj, ensure_ascii=False).encode("utf-8")
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        if self.path.rstrip("/") == "/health":
            self._send(200, {"status": "ok", "num_docs": getattr(self.server.retriever, "num_docs", None)})
        else:
            self._send(404, {"error": f"unknown path {self.path}; use POST /retrieve"})

    def do_POST(self):
        if self.path.rstrip("/") != "/retrieve":
            self._send(404, {"error": f"unknown path {self.path}; use POST /retrieve"})
            return
        try:
            length = int(self.headers.get("Content-Length", "0"))
        except ValueError:
            length = -1
        if not 0 < length <= MAX_BODY_BYTES:
            self.close_connection = True
            self._send(400, {"error": f"need a Content-Length in [1, {MAX_BODY_BYTES}]"})
            return
        body = self.rfile.read(length)
        try:
            queries, topk, return_scores = parse_request(body, self.server.default_topk)
        except RequestError as e:
            self._send(400, {"error": str(e)})
            return
        try:
            resp = retrieve_response(self.server.retriever, queries, topk, return_scores)
        except Exception as e:
            self._send(500, {"error": f"{type(e).__name__}: {e}"})
            return
        self._send(200, resp)

    def log_message(self, format, *args):
        if self.server.verbose:
            super().log_message(format, *args)


class RetrievalHTTPServer(HTTPServer):
    """HTTP server holding one retriever (searches are read-only, thread-safe).

    Load: the listen backlog is ``backlog`` (default 4096; the standard library's is 5, which
    resets connections when many clients connect at once; the kernel caps it at
    net.core.somaxconn), and accepted connections wait in the queue of a pool of ``workers``
    threads (default 32) rather than each getting a thread. An idle keep-alive connection is
    closed after ``idle_timeout`` seconds so that it does not hold a worker.
    """

    def __init__(self, address: tuple[str, int], retriever: Retriever, default_topk: int = 3, verbose: bool = False,
                 *, backlog: int = DEFAULT_BACKLOG, workers: int = DEFAULT_WORKERS, idle_timeout: float = 10.0):
        if backlog < 1 or workers < 1 or idle_timeout <= 0:
            raise ValueError("need backlog >= 1, workers >= 1 and idle_timeout > 0")
        self.retriever, self.default_topk, self.verbose = retriever, default_topk, verbose
        self.request_queue_size, self.idle_timeout = backlog, idle_timeout
        self._pool = concurrent.futures.ThreadPoolExecutor(workers, thread_name_prefix="retrieve")
        super().__init__(address, _Handler)

    def process_request(self, request, client_address):
        """Queue the connection for a worker (the accept loop goes straight back to accepting)."""
        self._pool.submit(self._serve_connection, request, client_address)

    def _serve_connection(self, request, client_address):
        try:
            self.finish_request(request, client_address)
        except Exception:
            self.handle_error(request, client_address)
        finally:
            self.shutdown_request(request)

    def server_close(self):
        super().server_close()
        self._pool.shutdown(wait=False, cancel_futures=True)

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        return f"http://{host}:{port}/retrieve"


def start_background_server(
    retriever: Retriever, host: str = "127.0.0.1", port: int = 0, default_topk: int = 3
) -> RetrievalHTTPServer:
    """Serve in a daemon thread (port 0 picks a free port; see ``.url``).

    Stop with ``server.shutdown(); server.server_close()``.
    """
    server = RetrievalHTTPServer((host, port), retriever, default_topk)
    threading.Thread(target=server.serve_forever, name="retrieval-server", daemon=True).start()
    return server


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description="Search-R1 compatible BM25 retrieval server")
    p.add_argument("--corpus", default=None, help='{"id","contents"} jsonl (default: the vendored corpus)')
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--topk", type=int, default=3, help="default topk when a request gives none")
    p.add_argument("--no-stopwords", action="store_true", help="keep English stop words in the index")
    p.add_argument("--cache-dir", default=None, help="BM25 index cache (default $SEED_JAX_CACHE/bm25, ~/.cache/seed_jax/bm25)")
    p.add_argument("--verbose", action="store_true", help="log every request")
    p.add_argument("--backlog", type=int, default=DEFAULT_BACKLOG, help="listen backlog (capped by net.core.somaxconn)")
    p.add_argument("--workers", type=int, default=DEFAULT_WORKERS, help="threads serving connections")
    args = p.parse_args(argv)
    corpus = args.corpus or default_corpus_path()
    retriever = BM25Retriever(corpus, stopwords=not args.no_stopwords, cache_dir=args.cache_dir)
    server = RetrievalHTTPServer((args.host, args.port), retriever, args.topk, verbose=args.verbose,
                                 backlog=args.backlog, workers=args.workers)
    print(f"serving {retriever.num_docs} passages from {corpus} at {server.url}", file=sys.stderr, flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()


if __name__ == "__main__":
    main()
