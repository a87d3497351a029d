"""Read a topology from a file in any format arborcc knows, chosen by suffix or content.

``.yaml``/``.yml``/``.json`` are arborcc topology files (:mod:`.topofile`), ``.xml`` is
NCCL topology XML (:mod:`.nccl_xml`); any other file is recognised by its content
(an XML element, an ``arborcc_topology`` document, or the header of a
``nvidia-smi topo -m`` matrix, :mod:`.nvidia_smi`). This is what ``--file PATH`` of the
command line calls: every failure is a :class:`~arborcc.errors.TopologyError`.
"""

from __future__ import annotations

import inspect
import os
import re
from pathlib import Path

from arborcc.errors import TopologyError
from arborcc.files import read_input_bytes
from arborcc.topology import nccl_xml, nvidia_smi, topofile
from arborcc.topology.model import Topology

_TOPOFILE_START = re.compile(r"(?:---\s*)?(?:#[^\n]*\n\s*)*[{]?\s*[\"']?arborcc_topology[\"']?\s*:")


def _check_options(reader, options: dict, what: str, source: str) -> None:
    accepted = inspect.signature(reader).parameters
    for key in options:
        if key not in accepted or key in ("text", "source"):
            raise TopologyError(f"option {key!r} does not apply to {what}", source=source)


def read_topology(path: str | os.PathLike, **options) -> Topology:
    """Read ``path`` as an arborcc topology file, NCCL topology XML or ``nvidia-smi topo -m`` text.

    ``options`` go to the format's reader (e.g. ``lane_bandwidth`` for NCCL XML and
    nvidia-smi dumps); an option that does not apply to the format is an error.
    """
    p = Path(path)
    source = str(path)
    suffix = p.suffix.lower()
    if suffix in topofile.SUFFIXES:
        if options:
            raise TopologyError(f"option {next(iter(options))!r} does not apply to an arborcc topology file",
                                source=source)
        return topofile.read_topology_file(p)
    data = read_input_bytes(p, TopologyError)
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise TopologyError(f"not a text file ({e.reason} at byte {e.start}): format not recognised",
                            source=source) from None
    start = text.lstrip(" \t\r\n")
    if suffix == ".xml" or start.startswith("<"):
        _check_options(nccl_xml.parse_nccl_xml, options, "NCCL topology XML", source)
        return nccl_xml.parse_nccl_xml(text, source, **options)
    if _TOPOFILE_START.match(start):
        if options:
            raise TopologyError(f"option {next(iter(options))!r} does not apply to an arborcc topology file",
                                source=source)
        return topofile.parse_topology(text, "json" if start.startswith("{") else "yaml", source)
    if nvidia_smi.looks_like_nvidia_smi(text):
        _check_options(nvidia_smi.parse_nvidia_smi, options, "nvidia-smi output", source)
        return nvidia_smi.parse_nvidia_smi(text, source, **options)
    raise TopologyError("format not recognised: expected an arborcc topology file (.yaml, .yml, .json), "
                        "NCCL topology XML (.xml) or the output of `nvidia-smi topo -m`", source=source)
