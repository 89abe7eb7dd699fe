"""The simulator's HTTP API: the slice of kube-apiserver's REST API that Berth's binder uses.

=======  ==============================================================  =================================
method   path                                                            effect
=======  ==============================================================  =================================
GET      /healthz, /status                                               liveness; counts (see ``status``)
GET      /api/v1/namespaces/{ns}/pods/{name}                             the pod
POST     /api/v1/namespaces/{ns}/pods                                    create a pod from a manifest
DELETE   /api/v1/namespaces/{ns}/pods/{name}                             delete it
POST     /api/v1/namespaces/{ns}/pods/{name}/binding                     bind (UID precondition in
                                                                         ``metadata.uid``, annotations
                                                                         copied onto the pod)
POST     /api/v1/namespaces/{ns}/pods/{name}/eviction                    evict (``deleteOptions.
                                                                         preconditions.uid``)
GET      /api/v1/nodes/{name}                                            the node
POST     /api/v1/nodes                                                   create a node from a manifest
PATCH    /api/v1/nodes/{name}                                            ``{"spec": {"unschedulable": b}}``
DELETE   /api/v1/nodes/{name}                                            remove it (and its pods)
GET      /apis/berth.io/v1alpha1/namespaces/{ns}/agentpools/{name}/scale the pool's Scale
PATCH    (same)                                                          ``{"spec": {"replicas": n}}``
=======  ==============================================================  =================================

Errors are ``metav1.Status`` bodies with kube's codes and wording: 404 NotFound, 409 Conflict or
AlreadyExists, 422 Invalid, 400 BadRequest. Every change is published before the answer.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web
from prometheus_client import Counter

from .clock import SimClock
from .outbox import EventSink
from .state import ApiResult, ClusterState, node_json, not_found, pod_json, status_body

API_REQUESTS = Counter(
    "berth_sim_api_requests_total", "Requests to the cluster simulator's API.", ["operation", "code"]
)

STATE_KEY: web.AppKey[ClusterState] = web.AppKey("state", ClusterState)
SINK_KEY: web.AppKey[EventSink] = web.AppKey("sink", object)  # type: ignore[arg-type]  # aiohttp's AppKey wants a type; the value is a protocol
CLOCK_KEY: web.AppKey[SimClock] = web.AppKey("clock", SimClock)
STATUS_KEY: web.AppKey[Callable[[], dict[str, Any]]] = web.AppKey("status", object)  # type: ignore[arg-type]  # aiohttp's AppKey wants a type; the value is a callable


def _respond(result: ApiResult) -> web.Response:
    return web.json_response(result.body, status=result.status)


def _bad_request(message: str) -> web.Response:
    return web.json_response(status_body(400, "BadRequest", message), status=400)


async def _json(request: web.Request) -> Any:
    try:
        return await request.json(loads=json.loads)
    except ValueError as exc:
        raise web.HTTPBadRequest(
            text=json.dumps(status_body(400, "BadRequest", f"invalid JSON body: {exc}")),
            content_type="application/json",
        ) from exc


Handler = Callable[[web.Request], Awaitable[web.Response]]


def _operation(name: str, handler: Handler) -> Handler:
    """Count the request by operation and status code."""

    async def wrapped(request: web.Request) -> web.Response:
        try:
            response = await handler(request)
        except web.HTTPException as exc:
            API_REQUESTS.labels(name, str(exc.status)).inc()
            raise
        API_REQUESTS.labels(name, str(response.status)).inc()
        return response

    return wrapped


async def _apply(request: web.Request, result: ApiResult) -> web.Response:
    if result.events:
        await request.app[SINK_KEY].emit(result.events)
    return _respond(result)


# --- pods ----------------------------------------------------------------------------------------


async def get_pod(request: web.Request) -> web.Response:
    state = request.app[STATE_KEY]
    record = state.pods.get(f"{request.match_info['ns']}/{request.match_info['name']}")
    if record is None:
        return _respond(not_found("pods", request.match_info["name"]))
    return web.json_response(pod_json(record))


async def create_pod(request: web.Request) -> web.Response:
    body = await _json(request)
    if not isinstance(body, dict) or body.get("kind") != "Pod":
        return _bad_request("the body must be a Pod object")
    app = request.app
    return await _apply(
        request, app[STATE_KEY].create_pod_from_manifest(body, request.match_info["ns"], app[CLOCK_KEY].now())
    )


async def delete_pod(request: web.Request) -> web.Response:
    app = request.app
    return await _apply(
        request, app[STATE_KEY].delete_pod(request.match_info["ns"], request.match_info["name"], app[CLOCK_KEY].now())
    )


async def bind_pod(request: web.Request) -> web.Response:
    body = await _json(request)
    name = request.match_info["name"]
    if not isinstance(body, dict):
        return _bad_request("the body must be a Binding object")
    target = (body.get("target") or {}).get("name")
    if not target:
        return _respond(
            ApiResult(422, status_body(422, "Invalid", f'Binding "{name}" is invalid: target.name: Required value'))
        )
    metadata = body.get("metadata") or {}
    annotations = metadata.get("annotations") or {}
    if not isinstance(annotations, dict) or not all(isinstance(v, str) for v in annotations.values()):
        return _bad_request("metadata.annotations must map strings to strings")
    app = request.app
    result = app[STATE_KEY].bind(
        request.match_info["ns"],
        name,
        target,
        app[CLOCK_KEY].now(),
        uid=metadata.get("uid") or None,
        annotations=annotations,
    )
    return await _apply(request, result)


async def evict_pod(request: web.Request) -> web.Response:
    body = await _json(request) if request.can_read_body else {}
    uid = (((body or {}).get("deleteOptions") or {}).get("preconditions") or {}).get("uid")
    app = request.app
    return await _apply(
        request,
        app[STATE_KEY].evict(
            request.match_info["ns"], request.match_info["name"], app[CLOCK_KEY].now(), uid=uid or None
        ),
    )


# --- nodes ---------------------------------------------------------------------------------------


async def get_node(request: web.Request) -> web.Response:
    state = request.app[STATE_KEY]
    name = request.match_info["name"]
    if name not in state.nodes:
        return _respond(not_found("nodes", name))
    return web.json_response(node_json(state.nodes[name], state.node_versions[name]))


async def create_node(request: web.Request) -> web.Response:
    body = await _json(request)
    if not isinstance(body, dict) or body.get("kind") != "Node":
        return _bad_request("the body must be a Node object")
    return await _apply(request, request.app[STATE_KEY].create_node_from_manifest(body, request.app[CLOCK_KEY].now()))


async def patch_node(request: web.Request) -> web.Response:
    body = await _json(request)
    spec = (body or {}).get("spec") if isinstance(body, dict) else None
    if not isinstance(spec, dict) or set(spec) != {"unschedulable"} or not isinstance(spec["unschedulable"], bool):
        return _bad_request('the simulator patches only {"spec": {"unschedulable": true|false}}')
    app = request.app
    return await _apply(
        request,
        app[STATE_KEY].set_unschedulable(request.match_info["name"], spec["unschedulable"], app[CLOCK_KEY].now()),
    )


async def delete_node(request: web.Request) -> web.Response:
    app = request.app
    return await _apply(request, app[STATE_KEY].remove_node(request.match_info["name"], app[CLOCK_KEY].now()))


# --- pools ---------------------------------------------------------------------------------------


async def get_scale(request: web.Request) -> web.Response:
    return _respond(request.app[STATE_KEY].get_scale(request.match_info["ns"], request.match_info["name"]))


async def patch_scale(request: web.Request) -> web.Response:
    body = await _json(request)
    replicas = ((body or {}).get("spec") or {}).get("replicas") if isinstance(body, dict) else None
    if isinstance(replicas, bool) or not isinstance(replicas, int):
        return _bad_request('the body must be {"spec": {"replicas": <integer>}}')
    app = request.app
    return await _apply(
        request,
        app[STATE_KEY].scale(request.match_info["ns"], request.match_info["name"], replicas, app[CLOCK_KEY].now()),
    )


# --- status --------------------------------------------------------------------------------------


async def healthz(_: web.Request) -> web.Response:
    return web.Response(text="ok")


async def status(request: web.Request) -> web.Response:
    return web.json_response(request.app[STATUS_KEY]())


def make_app(
    state: ClusterState, sink: EventSink, clock: SimClock, status_report: Callable[[], dict[str, Any]] | None = None
) -> web.Application:
    """The API over ``state``; events go to ``sink``; ``status_report`` answers ``/status``
    (default: the state's counts)."""
    app = web.Application(client_max_size=16 * 2**20)
    app[STATE_KEY] = state
    app[SINK_KEY] = sink
    app[CLOCK_KEY] = clock
    app[STATUS_KEY] = status_report or state.counts
    pods = "/api/v1/namespaces/{ns}/pods"
    pool = "/apis/berth.io/v1alpha1/namespaces/{ns}/agentpools/{name}/scale"
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/status", status)
    app.router.add_get(pods + "/{name}", _operation("get_pod", get_pod))
    app.router.add_post(pods, _operation("create_pod", create_pod))
    app.router.add_delete(pods + "/{name}", _operation("delete_pod", delete_pod))
    app.router.add_post(pods + "/{name}/binding", _operation("bind", bind_pod))
    app.router.add_post(pods + "/{name}/eviction", _operation("evict", evict_pod))
    app.router.add_get("/api/v1/nodes/{name}", _operation("get_node", get_node))
    app.router.add_post("/api/v1/nodes", _operation("create_node", create_node))
    app.router.add_patch("/api/v1/nodes/{name}", _operation("patch_node", patch_node))
    app.router.add_delete("/api/v1/nodes/{name}", _operation("delete_node", delete_node))
    app.router.add_get(pool, _operation("get_scale", get_scale))
    app.router.add_patch(pool, _operation("scale", patch_scale))
    app.router.add_put(pool, _operation("scale", patch_scale))
    return app
