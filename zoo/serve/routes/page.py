"""The page at ``/``: a static shell and its script and style (read once from the package,
public, holding no data), and the data it shows, behind the API key like every other route:
``/page/models`` (cards rendered safe, metrics, kinds) and each model's PNGs by role."""

from __future__ import annotations

from importlib import resources
from typing import Any

from fastapi import APIRouter, Request, Response
from fastapi.responses import FileResponse

from zoo.serve.models import ServedModel
from zoo.serve.request_errors import not_found
from zoo.serve.routes.cards import render_card
from zoo.serve.server import state_of

CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' blob: data:; connect-src 'self'; "
    "base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)
STATIC = {  # route -> (file in zoo/serve/static, content type)
    "/": ("index.html", "text/html; charset=utf-8"),
    "/page.js": ("page.js", "text/javascript; charset=utf-8"),
    "/page.css": ("page.css", "text/css; charset=utf-8"),
}
shell = APIRouter(tags=["page"])
router = APIRouter(tags=["page"])


def _static_route(path: str, file: str, content_type: str) -> None:
    content = resources.files("zoo.serve").joinpath("static", file).read_bytes()

    async def serve_file() -> Response:
        return Response(content, media_type=content_type, headers={"Content-Security-Policy": CSP})

    shell.add_api_route(path, serve_file, methods=["GET"], include_in_schema=False, name=f"page {file}")


for _path, (_file, _type) in STATIC.items():
    _static_route(_path, _file, _type)


@router.get("/page/models")
async def page_models(request: Request) -> dict[str, Any]:
    """What the page shows of each served model."""
    return {"models": [_describe(served) for served in state_of(request).models.values()]}


@router.get("/page/models/{name}/{role}.png")
async def model_image(name: str, role: str, request: Request) -> FileResponse:
    """A model's PNG by role (``curves``, ``confusion``): the path was fixed when the model loaded."""
    path = state_of(request).get(name).documents.images.get(role)
    if path is None:
        raise not_found(f"{name} has no {role} image")
    return FileResponse(path, media_type="image/png")


def _describe(served: ServedModel) -> dict[str, Any]:
    documents = served.documents
    images = {role: f"/page/models/{served.name}/{role}.png" for role in documents.images}
    card_images = {path.name: images[role] for role, path in documents.images.items()}
    shape = list(served.inputs[0].shape)
    return {
        "name": served.name,
        "kind": served.kind,
        "description": _description(served),
        "input_shape": shape,
        "class_names": served.class_names,
        "metrics": documents.metrics,
        "images": images,
        "card_html": render_card(documents.card, card_images) if documents.card else None,
    }


def _description(served: ServedModel) -> str:
    if served.kind == "text":
        return f"byte-level language model, {served.context_length}-token context: POST /v1/completions"
    if served.kind == "molecules":
        return f'reads molecules (SMILES): POST /v1/models/{served.name}:predict with {{"smiles": [...]}}'
    what = served.kind if served.kind in ("images", "texts") else f"vectors of {served.inputs[0].shape[1]}"
    route = f"POST /v1/models/{served.name}:predict" + (' with {"texts": [...]}' if served.kind == "texts" else "")
    meaning = served.meaning
    if meaning is not None and meaning.task == "regression":
        return f"predicts {meaning.target_name or 'a value'} of {what}: {route}"
    count = len(served.class_names) if served.class_names else served.outputs[0].shape[-1]
    if meaning is not None and meaning.task == "multi_label":
        return f"tags {what} with any of {count} labels (each over its threshold): {route}"
    return f"classifies {what} into {count} classes: {route}"
