"""The model calls an egress recorder saw: its passed exchanges handed, decoded, to
`oracle.evidence.model_api`.

Only requests the recorder *passed* to their host count: a blocked, canned or routed request
was answered by the sandbox, not by a model. Harness hosts (``--allow-host``: a real agent's
model API) count too; their traffic stays out of the evidence, and only what the responses say
of the model and its tokens reaches the record.

    calls = model_calls("net", recorder)      # [ModelCall, …], in request order
"""

from __future__ import annotations

from oracle.evidence.model_api import Exchange, recognise
from oracle.evidence.usage import ModelCall
from oracle.proxies.egress import EgressRecorder
from oracle.proxies.egress_log import Body, EgressRequest, Header, ResponseBody
from oracle.sinks.content_coding import LIMIT, decode


def _header(headers: list[Header], name: str) -> str | None:
    low = name.lower()
    return next((h.value for h in headers if h.name.lower() == low), None)


def _decoded(body: Body, coding: str | None) -> tuple[bytes | None, str | None]:
    """The body's bytes with their content coding undone, or None and why not."""
    if body.truncated:
        return None, f"cut at the recorder's cap ({body.kept} of {body.size} bytes kept)"
    if not body.complete:
        return None, "the exchange ended before the body did"
    try:
        out = decode(body.data(), coding)
    except Exception as exc:  # a coding that does not decode (or a decoder not installed)
        return None, f"its content coding {coding!r} does not decode: {exc}"
    if out.error is not None:
        return None, f"its content coding {coding!r} does not decode: {out.error}"
    if not out.complete:
        return None, "it inflates past the decoding limit"
    return (out.data if out.data is not None else body.data()), None


def _arrived(body: Body, coding: str | None) -> bytes | None:
    """What arrived of a body whose exchange broke, decoded as far as it goes; None where it
    was cut at the cap or does not decode."""
    if body.truncated:
        return None
    try:
        out = decode(body.data(), coding)
    except Exception:
        return None
    if out.error is not None or (out.data is not None and len(out.data) >= LIMIT):
        return None
    return out.data if out.data is not None else body.data()


def exchange_of(sink: str, request: EgressRequest, kept: ResponseBody | None) -> Exchange:
    """What `model_api` reads of one recorded request and the response body kept for it.

    An exchange that broke after the host began to answer (the client hung up mid-stream)
    keeps the host's status: a model that answered used tokens, so its call is one with
    unknown usage, not one no model answered."""
    req_body: bytes | None = None
    if request.body is not None:
        req_body, _ = _decoded(request.body, request.header("content-encoding"))
    elif request.state != "pending":
        req_body = b""
    response: bytes | None = None
    partial: bytes | None = None
    why: str | None = None
    status = request.status if request.state == "complete" else None
    answered = request.response_headers
    if request.state == "pending":
        why = "the exchange was still in progress"
    elif kept is None:
        why = request.error or "no response body was kept"
    elif kept.error is not None:
        why = f"the exchange broke before the answer ended: {kept.error}"
        status, answered = kept.status, list(kept.headers)
        partial = _arrived(kept.body, _header(answered, "content-encoding"))
    else:
        response, why = _decoded(kept.body, _header(request.response_headers, "content-encoding"))
    return Exchange(
        request_id=request.id,
        sink=sink,
        method=request.method,
        host=request.host,
        path=request.path,
        request_body=req_body,
        status=status,
        content_type=_header(answered, "content-type") or "",
        response_body=response,
        why_not_whole=why,
        partial_response_body=partial,
        request_headers={h.name.lower(): h.value for h in request.headers},
    )


def model_calls(sink: str, recorder: EgressRecorder) -> list[ModelCall]:
    """The model API calls among the requests `recorder` passed since its last reset."""
    out = []
    for request, kept in recorder.exchanges():
        if request.answer != "passed":
            continue
        call = recognise(exchange_of(sink, request, kept))
        if call is not None:
            out.append(call)
    return out
