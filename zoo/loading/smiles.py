"""Molecules as graphs for the graph models: SMILES (or RDKit molecules read from SDF files)
parsed by RDKit and turned into a PyG ``Data`` through torch_geometric's ``from_rdmol`` (its
atom and bond features), each categorical feature one-hot encoded, with the triangles that
``gin3``'s triangle readout reads. The one featurizer of training, ``zoo predict`` and ``zoo
serve``: a model trained on molecules records `INPUT_FORMAT` in its configuration.

RDKit is the optional extra ``zoo[chem]``; without it, one line names the extra."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from zoo.errors import InvalidArgumentError, ZooError
from zoo.loading.outputs import output_meaning

INPUT_FORMAT = "smiles/onehot-v1"  # what a molecule model's config.json says it reads
INSTALL_HINT = "pip install 'zoo[chem]'"
MAX_SMILES_CHARS = 2_000  # a SMILES longer than this is refused (drug-like molecules are under 200)
MAX_ATOMS = 500  # heavy atoms per molecule
MAX_PREDICT_SMILES = 1_024  # SMILES per prediction call (command line, server request)


def require_rdkit() -> Any:
    """RDKit's ``Chem`` module, or a `ZooError` naming the extra to install."""
    try:
        from rdkit import Chem
    except ImportError:
        raise ZooError(f"molecules (SMILES, SDF) are read by RDKit, which is not installed: {INSTALL_HINT}") from None
    return Chem


@contextlib.contextmanager
def quiet_rdkit() -> Iterator[None]:
    """RDKit's parse warnings off (a bad SMILES is reported once, by zoo, naming its line)."""
    from rdkit import RDLogger

    RDLogger.DisableLog("rdApp.*")
    try:
        yield
    finally:
        RDLogger.EnableLog("rdApp.*")


def _maps() -> tuple[dict[str, list[Any]], dict[str, list[Any]]]:
    import zoo.architectures.graph  # noqa: F401  (first: it imports PyG with its import-time warnings silenced)

    # isort: split
    from torch_geometric.utils.smiles import e_map, x_map

    return x_map, e_map


def feature_sizes() -> tuple[int, int]:
    """(node features, edge features) of a molecule graph: the one-hot widths of PyG's atom and
    bond vocabularies."""
    x_map, e_map = _maps()
    return sum(len(v) for v in x_map.values()), sum(len(v) for v in e_map.values())


def element_channels() -> int:
    """How many of an atom's feature channels, the first, are its element's one-hot (PyG's
    ``atomic_num``, x_map's first block): what atom masking hides and predicts."""
    x_map, _ = _maps()
    return len(x_map["atomic_num"])


def _one_hot(codes: torch.Tensor, sizes: Sequence[int]) -> torch.Tensor:
    """[N, len(sizes)] category codes -> [N, sum(sizes)] float one-hot blocks."""
    blocks = [torch.nn.functional.one_hot(codes[:, i], size) for i, size in enumerate(sizes)]
    return torch.cat(blocks, dim=1).float() if blocks else codes.float()


@dataclass(frozen=True)
class Unparsed:
    """A SMILES zoo refuses before RDKit reads it, and why (`mol_problem` says it)."""

    problem: str


def smiles_problem(text: str) -> str | None:
    """Why zoo refuses a (stripped) SMILES before RDKit reads it: empty, a NUL or a space, over zoo's length limit."""
    if not text:
        return "it is empty"
    if len(text) > MAX_SMILES_CHARS:
        return f"it is {len(text):,} characters, over zoo's limit of {MAX_SMILES_CHARS:,} characters per SMILES"
    if "\x00" in text:
        return "it holds a NUL character"
    space = next((c for c in text if c.isspace()), None)
    if space is not None:  # RDKit reads up to the space and takes the rest for a name: "CCO c1ccccc1" is CCO
        return f"it holds {'a tab' if space == chr(9) else 'a space' if space == ' ' else repr(space)}: one SMILES per molecule, with no spaces"
    return None


def parse_smiles(smiles: str) -> Any | Unparsed | None:
    """The RDKit molecule of ``smiles``; `Unparsed` when zoo refuses it unread (`smiles_problem`),
    None when RDKit cannot parse it."""
    Chem = require_rdkit()
    text = smiles.strip()
    problem = smiles_problem(text)
    if problem is not None:
        return Unparsed(problem)
    with quiet_rdkit():
        return Chem.MolFromSmiles(text)


def is_read(mol: Any) -> bool:
    """Whether `parse_smiles` (or an SDF reader) gave a molecule: neither None nor `Unparsed`."""
    return mol is not None and not isinstance(mol, Unparsed)


def mol_problem(mol: Any) -> str | None:
    """Why an RDKit molecule (or what `parse_smiles` gave) cannot be a graph (None: it can)."""
    if isinstance(mol, Unparsed):
        return mol.problem
    if mol is None:
        return "RDKit cannot parse it"
    atoms = mol.GetNumAtoms()
    if atoms == 0:
        return "it has no atoms"
    if atoms > MAX_ATOMS:
        return f"it has {atoms} atoms, more than the {MAX_ATOMS} a molecule may have"
    return None


def mol_graph(mol: Any) -> Any:
    """A PyG ``Data`` of an RDKit molecule: one-hot atom features ``x``, bonds both ways in
    ``edge_index`` with one-hot ``edge_attr``, and ``triangle_index``. Raises ValueError for an
    atom or bond outside PyG's vocabularies (e.g. a degree above 10)."""
    x_map, e_map = _maps()  # first: it imports PyG quietly
    from torch_geometric.utils.smiles import from_rdmol

    from zoo.architectures.graph import AddTriangles

    data = from_rdmol(_canonical_stereo(mol))
    data.x = _one_hot(data.x, [len(v) for v in x_map.values()])
    data.edge_attr = _one_hot(data.edge_attr.view(-1, len(e_map)), [len(v) for v in e_map.values()])
    return AddTriangles()(data)


def _canonical_stereo(mol: Any) -> Any:
    """A molecule with a stereocentre in its canonical SMILES's atom and bond order. PyG's atom
    feature is RDKit's chiral tag, clockwise or not in the order the atom's bonds were written:
    two writings of one stereocentre (``C[C@H](O)CC``, ``CC[C@@H](C)O``) would get opposite tags,
    and a model two answers. Molecules without one are kept as they are (a GNN's answer does
    not depend on atom order)."""
    Chem = require_rdkit()
    if all(atom.GetChiralTag() == Chem.ChiralType.CHI_UNSPECIFIED for atom in mol.GetAtoms()):
        return mol
    with quiet_rdkit():
        again = Chem.MolFromSmiles(Chem.MolToSmiles(mol))
    return again if again is not None else mol


def graph_or_problem(mol: Any) -> tuple[Any | None, str | None]:
    """(graph, None) for a usable molecule, (None, why not) otherwise."""
    problem = mol_problem(mol)
    if problem is not None:
        return None, problem
    try:
        return mol_graph(mol), None
    except ValueError:
        return (
            None,
            "an atom or bond is outside PyG's feature vocabularies (e.g. a degree above 10 or a charge above 6)",
        )


def smiles_batch(smiles: Sequence[str], where: str = "SMILES") -> Any:
    """One PyG ``Batch`` of the graphs of ``smiles`` (``zoo predict``, the server); a SMILES
    RDKit cannot parse raises `InvalidArgumentError` naming it and its position."""
    import zoo.architectures.graph  # noqa: F401  (first: it imports PyG with its import-time warnings silenced)

    # isort: split
    from torch_geometric.data import Batch

    if not smiles:
        raise InvalidArgumentError(f"{where}: no SMILES given; pass one or more, e.g. CCO c1ccccc1O")
    if len(smiles) > MAX_PREDICT_SMILES:
        raise InvalidArgumentError(f"{where}: {len(smiles)} SMILES, more than {MAX_PREDICT_SMILES} at once; split them")
    graphs = []
    for i, text in enumerate(smiles):
        if not isinstance(text, str):
            raise InvalidArgumentError(f"{where}[{i}]: a SMILES must be a string, got {type(text).__name__}")
        graph, problem = graph_or_problem(parse_smiles(text))
        if graph is None:
            shown = text if len(text) <= 80 else text[:77] + "..."
            raise InvalidArgumentError(f"{where}[{i}] {shown!r} is not a usable SMILES ({problem}); check it")
        graphs.append(graph)
    return Batch.from_data_list(graphs)


def reads_molecules(config: dict[str, Any]) -> bool:
    """Whether a model configuration (``pretrained_cfg``, a saved config.json) says the model reads molecules."""
    return config.get("input_format") == INPUT_FORMAT


def predict_molecules(model: torch.nn.Module, smiles: Sequence[str], where: str = "SMILES") -> list[Any]:
    """The model's answer per SMILES: the value (regression, in the units it was trained on) or
    ``{class name: probability}`` (classification)."""
    batch = smiles_batch(smiles, where).to(next(model.parameters()).device)
    with torch.no_grad():
        out = model(batch).float().cpu()
    cfg = model.pretrained_cfg
    meaning = output_meaning(cfg)
    if meaning.task == "regression":  # in the target's units (`OutputMeaning.values`)
        return [row[0].item() if row.numel() == 1 else row.tolist() for row in meaning.values(out)]
    names = cfg.get("class_names") or [str(i) for i in range(out.shape[-1])]
    return [dict(zip(names, row.softmax(-1).tolist())) for row in out]


def check_molecule_model(model: torch.nn.Module, name: str) -> None:
    """Refuse, naming the fix, a model that does not read molecules."""
    if not reads_molecules(model.pretrained_cfg):
        raise InvalidArgumentError(
            f"{name} does not read molecules (its config has no input_format {INPUT_FORMAT!r}); pass SMILES to a "
            "model fine-tuned on molecules, e.g. zoo finetune gin3 --data molecules.csv --out runs/mol"
        )


__all__ = [
    "INPUT_FORMAT",
    "MAX_ATOMS",
    "MAX_SMILES_CHARS",
    "Unparsed",
    "check_molecule_model",
    "feature_sizes",
    "graph_or_problem",
    "is_read",
    "mol_graph",
    "parse_smiles",
    "predict_molecules",
    "reads_molecules",
    "require_rdkit",
    "smiles_batch",
    "smiles_problem",
]


def reads_graphs(source: Any) -> bool:
    """Whether a resolved name (`zoo.loading.resolve.resolve`: weights, an architecture or a saved
    folder) is a model that reads graphs, whose .csv/.jsonl data can only be molecules; False too
    when it is none of these, or its folder cannot be read (loading says so)."""
    from zoo.loading.resolve import Registered, SavedFolder
    from zoo.loading.saved import read_saved_config
    from zoo.store import weight_entries

    try:
        if isinstance(source, SavedFolder):
            return weight_entries.input_kind(read_saved_config(source.path)["architecture"]) == "graphs"
        return isinstance(source, Registered) and weight_entries.input_kind(source.arch) == "graphs"
    except (ZooError, OSError, KeyError):
        return False
