"""Model cards as safe HTML for the page: Python-Markdown (tables, code) with raw HTML turned
off (a card's ``<script>`` shows as text), links kept only to http(s) and in-page anchors, and
images kept only where the server knows the file (the card's curves PNG, served by the model's
name): every other address is dropped, so a card never makes the browser fetch elsewhere."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Mapping
from urllib.parse import urlsplit

import markdown
from markdown.treeprocessors import Treeprocessor

SAFE_SCHEMES = ("http", "https")


class _SafeAddresses(Treeprocessor):
    def __init__(self, md: markdown.Markdown, images: Mapping[str, str]) -> None:
        super().__init__(md)
        self.images = images

    def run(self, root: ET.Element) -> None:
        for parent in root.iter():
            for child in list(parent):
                if child.tag == "img":
                    self._image(parent, child)
                elif child.tag == "a" and not _safe_link(child.get("href", "")):
                    child.attrib.pop("href", None)

    def _image(self, parent: ET.Element, image: ET.Element) -> None:
        url = self.images.get(image.get("src", ""))
        if url is not None:
            image.set("src", url)
            image.set("loading", "lazy")
            return
        stand_in = ET.Element("em")  # the alt text in place of an image the server does not serve
        stand_in.text, stand_in.tail = f"[{image.get('alt', 'image')}]", image.tail
        parent.insert(list(parent).index(image), stand_in)
        parent.remove(image)


def _safe_link(href: str) -> bool:
    return href.startswith("#") or urlsplit(href).scheme in SAFE_SCHEMES


def render_card(text: str, images: Mapping[str, str]) -> str:
    """``text`` (Markdown) as HTML; ``images`` maps the file names the card refers to
    (``resnet20.fmnist.png``) to the addresses the server answers them at."""
    md = markdown.Markdown(extensions=["tables", "fenced_code"], output_format="html")
    md.preprocessors.deregister("html_block")
    md.inlinePatterns.deregister("html")
    md.treeprocessors.register(_SafeAddresses(md, images), "safe_addresses", 0)
    return md.convert(text)
