"""The halo exchange between samplers (adjacency) and between loaders (features): both ends.

Every sampler and loader *holds* a set of parts (memory-mapped from the store, or from a host-local
copy staged from it: the replicas of a tier on one host map the same files, so the host keeps one
copy of its parts in the page cache whatever the number of replicas) and answers
:class:`~shared.protocol.HaloRequest` s for them from a ROUTER socket served by a thread
(:class:`HaloServer`, checking each request with :func:`check_request`).  Rows of vertices held
elsewhere are fetched with one request per owner and per hop (:class:`HaloClient`), through the one
wire module, with the same limits and CURVE as every other socket.  Remote rows stay in a
byte-budgeted cache (:mod:`shared.halo_cache`).  Requests go to a holder
(:class:`~shared.ownership.Membership`), so a part is served from its old holder until the new one
has loaded it (see docs/distributed.md).  Who holds what: :mod:`shared.ownership`; the bytes
counted: :mod:`shared.traffic`; the process that owns both ends: :mod:`shared.holder`.
"""
from __future__ import annotations

import itertools
import logging
import threading
import time
import zlib
from typing import Callable

import numpy as np
import zmq
from numba import njit

from argosy.shared.errors import ProtocolError, RequestFailedError
from argosy.shared.ownership import Membership, host_label
from argosy.shared.protocol import (HALO_WHAT, AdjacencyRows, ErrorReply, FeatureRows, HaloRequest, Message)
from argosy.shared.traffic import WireCounter, frames_bytes
from argosy.shared.transport import Receiver, bind_random, make_socket, peer_of
from argosy.shared.wire import Limits, decode, encode

__all__ = ["check_request", "HaloServer", "HaloClient", "gather_csr_rows", "scatter_csr", "MAX_REQUEST_IDS"]

logger = logging.getLogger(__name__)

MAX_REQUEST_IDS = 1 << 22
"""Vertex ids one halo request may carry (a larger request is answered with ``too_large``)."""
HALO_LIMITS = Limits(max_header_bytes=64 * 1024, max_frame_bytes=1 << 30, max_message_bytes=1 << 31, max_frames=6)


def check_request(req, serves: tuple[str, ...], assignment: np.ndarray, held: np.ndarray) -> np.ndarray:
    """Validate a halo request against what this process serves and holds; returns the part of each id.

    Raises ``RequestFailedError`` with code ``bad_request`` (wrong kind, ids out of range) or
    ``not_owner`` (ids of parts not held here: the requester re-reads the registry and retries).
    """
    if req.what not in serves:
        raise RequestFailedError("bad_request", f"this process serves {' and '.join(serves)}, not {req.what!r}")
    ids, n = req.ids, assignment.shape[0]
    if ids.size and (ids.min() < 0 or ids.max() >= n):
        raise RequestFailedError("bad_request", f"vertex ids must lie in [0, {n})")
    parts = assignment[ids]
    if not held[parts].all():
        missing = sorted(set(np.unique(parts[~held[parts]]).tolist()))
        raise RequestFailedError("not_owner", f"parts {missing} are not held here "
                                              f"(held: {np.flatnonzero(held).tolist()})")
    return parts


@njit(cache=True, nogil=True)
def gather_csr_rows(part_indptr, part_indices, parts, locs, degree_only):
    """Rows ``locs[i]`` of part ``parts[i]``'s CSR, in request order: (indptr int64[m+1], indices)."""
    m = parts.shape[0]
    indptr = np.zeros(m + 1, np.int64)
    for i in range(m):
        ip = part_indptr[parts[i]]
        indptr[i + 1] = indptr[i] + ip[locs[i] + 1] - ip[locs[i]]
    n = 0 if degree_only else indptr[m]
    indices = np.empty(n, part_indices[0].dtype)
    if not degree_only:
        for i in range(m):
            ip = part_indptr[parts[i]]
            src = part_indices[parts[i]]
            s = ip[locs[i]]
            for t in range(indptr[i + 1] - indptr[i]):
                indices[indptr[i] + t] = src[s + t]
    return indptr, indices


def scatter_csr(out_indptr: np.ndarray, out_indices: np.ndarray, sel: np.ndarray, indptr: np.ndarray,
                indices: np.ndarray) -> None:
    """Copy CSR rows (``indptr``/``indices``, one per ``sel``) to rows ``sel`` of a CSR laid out by ``out_indptr``."""
    lens = np.diff(indptr)
    if indices.shape[0]:
        out_indices[np.repeat(out_indptr[sel] - indptr[:-1], lens) + np.arange(indices.shape[0])] = indices


# ---------------------------------------------------------------------------------------------
class HaloServer:
    """Answers halo requests for the parts this process holds, from its own thread.

    Args:
        handler: ``handler(request) -> reply message``; raise :class:`RequestFailedError` with
            ``args = (code, sentence)`` to answer with an :class:`ErrorReply`.
        peer_host: ``peer_host(request) -> bool`` whether the requester is on another host.
    """

    def __init__(self, zctx: zmq.Context, handler: Callable[[HaloRequest], Message], counter: WireCounter,
                 port: int = 0, coord=None, cut_off_after: int = 16):
        self.zctx, self.handler, self.counter = zctx, handler, counter
        self.coord, self.cut_off_after = coord, cut_off_after
        self.rx: Receiver | None = None
        """Strike bookkeeping shared with the data plane's receivers (bad requests, peers cut off)."""
        self.host = host_label()
        self.stop = threading.Event()
        self._ready = threading.Event()
        self.endpoint: str | None = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, args=(port,), name="halo-server", daemon=True)
        self._thread.start()
        self._ready.wait(30)
        if self._error is not None:
            raise self._error

    def _run(self, port: int) -> None:
        try:
            sock = make_socket(self.zctx, zmq.ROUTER, sndhwm=64, rcvhwm=64, curve="server",
                               max_msg_bytes=HALO_LIMITS.max_message_bytes)
            self.endpoint = bind_random(sock, port)
            self.rx = Receiver(sock, coord=self.coord, cut_off_after=self.cut_off_after, name="halo server")
        except BaseException as e:          # reported to the constructor
            self._error = e
            self._ready.set()
            return
        self._ready.set()
        try:
            while not self.stop.is_set():
                if not sock.poll(100, zmq.POLLIN):
                    continue
                self.rx.flush()
                frames = sock.recv_multipart(copy=False)
                ident, body = frames[0], frames[1:]
                nin = frames_bytes(body)
                peer = peer_of(body[0]) if body else ""
                if peer in self.rx.cut_off:
                    self.rx.count("cut_off_messages")
                    continue
                req: HaloRequest | None = None
                try:
                    msg = decode(body, HALO_LIMITS)
                    if type(msg) is not HaloRequest:
                        raise RequestFailedError("bad_request", f"expected a HaloRequest, got {type(msg).__name__}")
                    req = msg
                    if req.what not in HALO_WHAT:
                        raise RequestFailedError("bad_request", f"unknown halo request {req.what!r} (known: {sorted(HALO_WHAT)})")
                    if req.ids.ndim != 1 or req.ids.dtype != np.int64:
                        raise RequestFailedError("bad_request", f"ids must be int64[m] (got {req.ids.dtype}{list(req.ids.shape)})")
                    if req.ids.shape[0] > MAX_REQUEST_IDS:
                        raise RequestFailedError("too_large", f"{req.ids.shape[0]} ids in one request (limit {MAX_REQUEST_IDS})")
                    reply = self.handler(req)
                    reply.request_id = req.request_id
                except (ProtocolError, RequestFailedError) as e:
                    code, text = (e.args + ("",))[:2] if isinstance(e, RequestFailedError) else ("bad_request", str(e))
                    if code != "not_owner":      # not_owner is honest (parts moved); the rest is a bad peer
                        self.rx.strike(peer, e)
                    reply = ErrorReply(request_id=str(req.request_id if req else ""), code=code, message=text)
                except Exception as e:  # noqa: BLE001 - one bad request must not kill the server
                    logger.exception("halo request failed")
                    reply = ErrorReply(request_id=str(req.request_id if req else ""), code="internal",
                                       message=f"{type(e).__name__}: {e}")
                out = encode(reply)
                cross = req is not None and req.host != self.host
                epoch = req.epoch if req is not None else None
                self.counter.add(nin, sent=False, cross_host=cross, epoch=None, halo=True)
                self.counter.add(frames_bytes(out), sent=True, cross_host=cross, epoch=epoch, halo=True)
                try:
                    sock.send_multipart([ident, *out], copy=False, flags=zmq.NOBLOCK)
                except zmq.Again:
                    logger.warning("halo requester's queue is full; reply dropped (it will retry)")
        finally:
            self.rx.flush(force=True)
            sock.close(0)

    def close(self) -> None:
        self.stop.set()
        self._thread.join(5)


class HaloClient:
    """Fetches rows of vertices held by other members of the same tier, one request per holder.

    Args:
        membership: the tier's :class:`Membership` (refreshed here when a holder is missing or wrong).
        assignment: int32[n] part of every vertex.
    """

    _ids = itertools.count(1)

    def __init__(self, zctx: zmq.Context, membership: Membership, assignment: np.ndarray, counter: WireCounter,
                 timeout: float = 10.0, stop: threading.Event | None = None):
        self.zctx, self.members, self.assign, self.counter = zctx, membership, assignment, counter
        self.timeout, self.stop = timeout, stop
        self.host = host_label()
        self.socks: dict[str, tuple[str, zmq.Socket]] = {}

    def _sock(self, sid: str) -> zmq.Socket:
        ep = self.members.members[sid]["halo"]
        cur = self.socks.get(sid)
        if cur is None or cur[0] != ep:
            if cur is not None:
                cur[1].close(0)
            s = make_socket(self.zctx, zmq.DEALER, sndhwm=64, rcvhwm=64, curve="client",
                            max_msg_bytes=HALO_LIMITS.max_message_bytes)
            s.connect(ep)
            self.socks[sid] = (ep, s)
        return self.socks[sid][1]

    def close(self) -> None:
        for _, s in self.socks.values():
            s.close(0)
        self.socks.clear()

    def _route(self, parts: np.ndarray) -> dict[int, str]:
        """A holder per part: an assigned owner when one holds it; among a host's replicas, the one
        this requester hashes to (requesters spread over the replicas, each sticks to one)."""
        out = {}
        me = self.members.self_id
        for p in np.unique(parts).tolist():
            hs = [h for h in self.members.holders(p) if h != me and "halo" in self.members.members[h]]
            if hs:
                own = set(self.members.owners_of(p))
                pick = [h for h in hs if h in own] or hs
                out[p] = pick[zlib.crc32(f"{me}/{p}".encode()) % len(pick)]
        return out

    def fetch(self, what: str, ids: np.ndarray, epoch: int, values: np.ndarray | None = None) -> Message:
        """Rows of ``ids`` (any order, held elsewhere), as one reply in ``ids`` order.

        ``values`` float32[m, D]: one row per id sent along (``embedding_grads``: each holder gets
        the rows of its ids).  Returns :class:`AdjacencyRows` (``adjacency``/``degree``) or
        :class:`FeatureRows` (an empty one for ``embedding_grads``).
        Raises:
            RequestFailedError: no holder answered within ``timeout`` (holders are re-read from
                the registry and the request re-sent meanwhile).
        """
        ids = np.ascontiguousarray(ids, np.int64)
        parts = np.asarray(self.assign[ids])
        deadline = time.monotonic() + self.timeout
        todo = np.arange(ids.shape[0])
        results: list[tuple[np.ndarray, Message]] = []
        last_err = "no holder published these parts"
        while todo.size:
            route = self._route(parts[todo])
            if len(route) < np.unique(parts[todo]).size:
                if time.monotonic() > deadline or (self.stop is not None and self.stop.is_set()):
                    missing = sorted(set(np.unique(parts[todo]).tolist()) - set(route))
                    raise RequestFailedError(f"halo {what}: no live holder of parts {missing} within "
                                             f"{self.timeout:.0f} s ({last_err})")
                time.sleep(0.2)
                self.members.refresh()
                continue
            holder_of = np.array([route[p] for p in parts[todo].tolist()], dtype=object) if todo.size else None
            pending: dict[int, tuple[np.ndarray, zmq.Socket, bool]] = {}
            failed: list[np.ndarray] = []
            for sid in sorted(set(route.values())):
                sel = todo[holder_of == sid]
                rid = next(self._ids)
                req = HaloRequest(request_id=rid, what=what, epoch=epoch, host=self.host, ids=ids[sel])
                if values is not None:
                    req.values = np.ascontiguousarray(values[sel])
                sock = self._sock(sid)
                frames = encode(req)
                cross = self.members.members[sid].get("host_label") != self.host
                # at most a second per try: a holder that died keeps its registry entry until its
                # heartbeat expires, and the next try re-reads the registry and routes around it
                if not sock.poll(int(min(max(deadline - time.monotonic(), 0.05), 1.0) * 1000), zmq.POLLOUT):
                    failed.append(sel)
                    last_err = "holder not accepting requests"
                    continue
                sock.send_multipart(frames, copy=False)
                self.counter.add(frames_bytes(frames), sent=True, cross_host=cross, epoch=epoch, halo=True)
                self.counter.count("halo_requests")
                pending[rid] = (sel, sock, cross)
            poller = zmq.Poller()
            for _, sock, _ in pending.values():
                poller.register(sock, zmq.POLLIN)
            while pending and time.monotonic() < deadline:
                ready = dict(poller.poll(200))
                for sock in list(ready):
                    while sock.poll(0, zmq.POLLIN):
                        frames = sock.recv_multipart(copy=False)
                        try:
                            msg = decode(frames, HALO_LIMITS)
                        except ProtocolError as e:
                            logger.warning("malformed halo reply dropped: %s", e)
                            continue
                        rid = int(msg.request_id) if str(msg.request_id).lstrip("-").isdigit() else -1
                        if rid not in pending:
                            continue                     # a late reply to a request already retried
                        sel, _, cross = pending.pop(rid)
                        self.counter.add(frames_bytes(frames), sent=False, cross_host=cross, epoch=None, halo=True)
                        if isinstance(msg, ErrorReply):
                            last_err = f"{msg.code}: {msg.message}"
                            if msg.code in ("bad_request", "too_large"):
                                raise RequestFailedError(f"halo {what} refused by its holder: {last_err}")
                            failed.append(sel)
                        else:
                            results.append((sel, msg))
            for sel, _, _ in pending.values():
                failed.append(sel)
                last_err = "timed out"
            todo = np.concatenate(failed) if failed else np.empty(0, np.int64)
            if todo.size:
                if time.monotonic() > deadline:
                    raise RequestFailedError(f"halo {what}: {todo.size} rows not served within {self.timeout:.0f} s "
                                             f"({last_err})")
                self.members.refresh()
        self.counter.count("halo_rows", ids.shape[0])
        return self._assemble(what, ids.shape[0], results)

    @staticmethod
    def _assemble(what: str, m: int, results: list[tuple[np.ndarray, Message]]) -> Message:
        if what in ("adjacency", "degree"):
            lens = np.zeros(m, np.int64)
            dtype = np.int64
            for sel, r in results:
                if not isinstance(r, AdjacencyRows) or r.indptr.shape != (sel.size + 1,):
                    raise RequestFailedError(f"halo {what}: reply does not match the request ({type(r).__name__})")
                lens[sel] = np.diff(r.indptr)
                dtype = r.indices.dtype
            indptr = np.zeros(m + 1, np.int64)
            np.cumsum(lens, out=indptr[1:])
            indices = np.empty(indptr[-1] if what == "adjacency" else 0, dtype)
            weighted = bool(results) and all(r.weighted_degrees.shape[0] == sel.size for sel, r in results)
            wts = np.empty(indices.shape[0] if weighted else 0, np.float32)   # edge weights, when the store has them
            wdeg = np.empty(m if weighted else 0, np.float32)
            typed = what == "adjacency" and any(r.types.size for _, r in results)
            types = np.empty(indices.shape[0] if typed else 0, np.int32)        # relations, a typed store's
            if what == "adjacency":
                for sel, r in results:
                    if r.indices.shape[0] != r.indptr[-1]:
                        raise RequestFailedError("halo adjacency: reply indices do not match its indptr")
                    scatter_csr(indptr, indices, sel, r.indptr, r.indices)
                    if weighted:
                        if r.weights.shape != r.indices.shape:
                            raise RequestFailedError("halo adjacency: reply weights do not match its indices")
                        scatter_csr(indptr, wts, sel, r.indptr, r.weights)
                    if typed:
                        if r.types.shape != r.indices.shape:
                            raise RequestFailedError("halo adjacency: reply relations do not match its indices")
                        scatter_csr(indptr, types, sel, r.indptr, r.types.astype(np.int32, copy=False))
            if weighted:
                for sel, r in results:
                    wdeg[sel] = r.weighted_degrees
            return AdjacencyRows(indptr=indptr, indices=indices, weights=wts, weighted_degrees=wdeg, types=types)
        feats = labels = None
        for sel, r in results:
            if not isinstance(r, FeatureRows):
                raise RequestFailedError(f"halo {what}: reply is a {type(r).__name__}")
            if what == "embedding_grads":
                continue                                 # applied by the holder: nothing comes back
            if what in ("features", "embeddings"):
                if r.features.ndim != 2 or r.features.shape[0] != sel.size:
                    raise RequestFailedError("halo features: reply rows do not match the request")
                if feats is None:
                    feats = np.empty((m, r.features.shape[1]), r.features.dtype)
                feats[sel] = r.features
            else:
                if r.labels.shape != (sel.size,):
                    raise RequestFailedError("halo labels: reply rows do not match the request")
                if labels is None:
                    labels = np.empty(m, np.int64)
                labels[sel] = r.labels
        return FeatureRows(features=feats if feats is not None else np.empty((0, 0), np.float32),
                           labels=labels if labels is not None else np.empty(0, np.int64))
