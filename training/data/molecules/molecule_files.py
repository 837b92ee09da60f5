"""Users' molecules as a `DataSource` of graphs: a ``.csv``/``.jsonl`` with a ``smiles`` column
(any case) and one label column, or an ``.sdf`` file with the label in a data field
(``--label-field``). Numeric labels are a regression target (standardised for training, the
statistics recorded in the model), string labels classes; ``task`` overrides. Graphs come
from `zoo.loading.smiles` (RDKit, PyG's atom and bond features). A molecule RDKit cannot
read is refused by line, or, with ``skip_bad_rows``, skipped and counted. The validation
split is random or by Bemis–Murcko scaffold (`scaffold_split`)."""

from __future__ import annotations

import csv
import json
import math
import statistics
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import torch
from torch.utils.data import Dataset

from zoo.errors import DataError, InvalidArgumentError
from zoo.loading.smiles import INPUT_FORMAT, feature_sizes, graph_or_problem, is_read, parse_smiles, require_rdkit
from zoo.training.data.labels import finite_number, is_missing_marker, is_number, merged_spellings, number_problem
from zoo.training.data.source import DataSource, check_classes, class_counts
from zoo.training.data.targets import TABLE_TASKS, warn_conflicts
from zoo.training.data.text.text_rows import clipped, decode_text, plural, shown_names

MOLECULE_SUFFIXES = (".sdf",)
MAX_FILE_BYTES = 256 << 20  # a molecule file larger than this is refused
MAX_MOLECULES = 500_000
MAX_LABEL_NAME = 256  # characters of the label column's name (it is recorded in the model's config)
TASKS = TABLE_TASKS  # molecules read the first three (multi-label is images', text rows' and tensors')
SPLITS = ("random", "scaffold")
_BAD_SHOWN = 5  # bad rows named in a warning when they are skipped
Record = tuple[int, Any, str]  # a row's line, its RDKit molecule (None: unreadable) and its label
_NAME_IT = "name the SMILES column smiles, or pass --smiles-field NAME"


@dataclass(frozen=True)
class MoleculeOptions:
    """How a labelled file is read: ``label_field`` (the label column, or the SDF data field;
    image lists and text rows take it too), ``task`` (molecules' auto: numbers are regression,
    strings classes; the others': `zoo.training.data.targets`), ``label_delimiter`` (between
    the tags of a multi-label field), and for molecules ``split`` (random or by scaffold) and
    ``skip_bad_rows`` (skip molecules RDKit cannot read instead of refusing the file).
    ``graph_model`` names the model that reads graphs (``zoo finetune`` sets it): its .csv/.jsonl
    must then be molecules, and one without a smiles column is refused as the molecule reader's."""

    label_field: str | None = None
    task: Literal["auto", "classification", "regression", "multi-label"] = "auto"
    split: Literal["random", "scaffold"] = "random"
    skip_bad_rows: bool = False
    graph_model: str | None = None
    label_delimiter: str = " "
    smiles_field: str = "smiles"  # the SMILES column (any case): --smiles-field, as chemprop's --smiles-columns

    def __post_init__(self) -> None:
        if self.task not in TASKS:
            raise InvalidArgumentError(f"task (--task) must be one of {', '.join(TASKS)}, got {self.task!r}")
        if not isinstance(self.label_delimiter, str) or not 0 < len(self.label_delimiter) <= 8:
            raise InvalidArgumentError(
                f"label_delimiter (--label-delimiter) must be 1 to 8 characters, got {self.label_delimiter!r}"
            )
        if not isinstance(self.smiles_field, str) or not 0 < len(self.smiles_field) <= MAX_LABEL_NAME:
            raise InvalidArgumentError(
                f"smiles_field (--smiles-field) must be a column's name, got {self.smiles_field!r}"
            )
        if self.split not in SPLITS:
            raise InvalidArgumentError(f"split (--split) must be one of {', '.join(SPLITS)}, got {self.split!r}")


@dataclass
class MoleculeSource(DataSource):
    """A `DataSource` of molecule graphs; ``smiles`` per sample (canonical, for scaffolds),
    the edge features the model needs, how the validation set is split and what was skipped."""

    smiles: Sequence[str] = ()
    edge_dim: int = 0
    split_by: str = "random"
    skipped: int = 0
    input_format: str = INPUT_FORMAT

    def split(
        self,
        val_fraction: float = 0.1,
        seed: int = 0,
        train_transform: Callable[[Any], Any] | None = None,
        eval_transform: Callable[[Any], Any] | None = None,
        limit: int | None = None,
    ) -> tuple[Dataset, Dataset | None]:
        """As `DataSource.split`; with ``split_by == "scaffold"`` the validation molecules
        share no Bemis–Murcko scaffold with the training ones (`scaffold_split`)."""
        if self.split_by != "scaffold" or val_fraction == 0:
            return super().split(val_fraction, seed, train_transform, eval_transform, limit)
        train, val = scaffold_split(self.smiles, val_fraction, seed)
        if limit is not None:
            train = train[:limit]
        if not train or not val:
            raise DataError(
                f"{self.description}: the scaffold split left {len(train)} training and {len(val)} validation "
                "molecules; add molecules, change --val-fraction, or use --split random"
            )
        return self.make_subset(train, train_transform), self.make_subset(val, eval_transform)


class _Graphs(Dataset):
    """Molecule graphs in memory."""

    def __init__(self, graphs: list[Any]) -> None:
        self.graphs = graphs

    def __len__(self) -> int:
        return len(self.graphs)

    def __getitem__(self, index: int) -> Any:
        return self.graphs[index]


def is_molecule_file(path: Path, smiles_field: str = "smiles") -> bool:
    """An ``.sdf`` file, or a ``.csv``/``.jsonl`` whose first row names a ``smiles`` column (or ``smiles_field``)."""
    suffix = path.suffix.lower()
    if suffix in MOLECULE_SUFFIXES:
        return True
    if suffix not in (".csv", ".jsonl"):
        return False
    return any(name.lower() == smiles_field.lower() for name in first_names(path) or [])


def first_names(path: Path) -> list[str] | None:
    """The column names of a ``.csv``'s first line, or the keys of a ``.jsonl``'s first object
    (None: no first line, or not a JSON object)."""
    with open(path, "rb") as file:
        first = file.read(4096).decode("utf-8", "replace").lstrip("\ufeff").splitlines()[:1]
    if not first:
        return None
    if path.suffix.lower() == ".csv":
        return [name.strip() for name in next(csv.reader(first), [])]
    try:
        row = json.loads(first[0])
    except (ValueError, RecursionError):  # a first line nested thousands deep is no header
        return None
    return [str(key) for key in row] if isinstance(row, dict) else None


def _name_it(smiles: str) -> str:  # the fix when no column bears the SMILES column's name (default or given)
    return _NAME_IT if smiles.lower() == "smiles" else f"check --smiles-field {clipped(smiles)}"


def no_smiles_column(path: Path, model: str, smiles_field: str = "smiles") -> DataError:
    """The error for a ``.csv``/``.jsonl`` without a ``smiles_field`` column given to ``model``, which reads graphs."""
    names = first_names(path) or []
    text = " (rows of text and a label are for a model that reads text, e.g. moe_encoder)" if "text" in names else ""
    return DataError(
        f"{path}, line 1: {model} reads graphs, which zoo's molecule reader makes from a .csv/.jsonl: it wants a "
        f"{clipped(smiles_field)} column and a label column, and the first line names {[name[:40] for name in names[:20]]}; "
        f"{_name_it(smiles_field)}{text}"
    )


def molecule_source(path: Path, options: MoleculeOptions | None = None) -> MoleculeSource:
    """The molecules of ``path`` as graphs with their labels (see the module docstring)."""
    options = options or MoleculeOptions()
    if options.task == "multi-label":
        raise InvalidArgumentError(
            f"{path}: multi-label molecules are not read yet; --task takes classification or regression"
        )
    require_rdkit()
    size = path.stat().st_size
    if size > MAX_FILE_BYTES:
        raise DataError(f"{path} is {size >> 20} MiB; molecule files are read whole, up to {MAX_FILE_BYTES >> 20} MiB")
    if path.suffix.lower() == ".sdf":
        records, label_name = _sdf_records(path, options.label_field)
    else:
        records, label_name = _table_records(path, options.label_field, options.smiles_field)
    if len(label_name) > MAX_LABEL_NAME:
        raise DataError(
            f"{path}: the label's name is {len(label_name)} characters; rename it (at most {MAX_LABEL_NAME})"
        )
    if len(records) > MAX_MOLECULES:
        raise DataError(f"{path} holds {len(records)} molecules, more than {MAX_MOLECULES}; split the file")
    labelled = _labelled(path, records, options)
    graphs, smiles, labels, lines = _graphs(path, labelled, options.skip_bad_rows)
    skipped = len(records) - len(graphs)
    if len(graphs) < 2:
        raise DataError(f"{path}: {plural(len(graphs), 'usable molecule')}; training needs many")
    task = options.task if options.task != "auto" else ("regression" if _all_numbers(labels) else "classification")
    if options.task == "auto" and task == "classification":
        _refuse_missing_values(path, labels, lines)
    described = f"{path.name} ({len(graphs)} molecules{f', {skipped} skipped' if skipped else ''}, label {label_name!r}"
    if task == "regression":
        values = _numbers(path, labels, lines)
        if len(set(values)) == 1:
            raise DataError(f"{path}: every {label_name!r} value is {values[0]:g}; a regression target must vary")
        target = {"name": label_name, "mean": statistics.fmean(values), "std": statistics.stdev(values)}
        for graph, value in zip(graphs, values):
            graph.y = torch.tensor([value], dtype=torch.float64)
        num_classes, class_names, counts, indices = 1, None, None, None
        described += ", regression)"
    else:
        target = None
        labels = merged_spellings(labels)  # 0 and 0.0 in one column: one class
        class_names = sorted(set(labels), key=_class_order)
        number = {name: i for i, name in enumerate(class_names)}
        indices = torch.tensor([number[label] for label in labels], dtype=torch.long)
        for graph, index in zip(graphs, indices.tolist()):
            graph.y = torch.tensor([index], dtype=torch.long)
        counts = class_counts(indices, class_names)
        check_classes(str(path), counts, "add molecules of the other classes, or pass --task regression")
        num_classes = len(class_names)
        described += f", {num_classes} classes)"
    targets = indices if indices is not None else torch.tensor(values)
    warn_conflicts(str(path), "molecule", smiles, list(zip(lines, labels)), targets)  # by canonical SMILES
    source = _source(graphs, smiles, described, num_classes, class_names, counts, indices, target, options, skipped)
    source.task_note = _task_note(path, task, options.task != "auto", label_name, labels)
    return source


def _task_note(path: Path, task: str, asked: bool, label_name: str, labels: list[str]) -> str:
    """The line that says which task the labels get and why; labels of two integers only (a
    binary activity column) that become a regression are also warned about, naming the fix."""
    if asked:
        return f"task: {task} (--task {task})"
    if task == "classification":
        example = next(label for label in labels if not is_number(label))
        return f"task: classification (the {label_name!r} labels are not all numbers, e.g. {example[:40]!r})"
    values = sorted({finite_number(label) or 0.0 for label in labels})
    if len(values) == 2 and all(value.is_integer() and abs(value) < 1e9 for value in values):  # e.g. 0 and 1
        pair, fix = f"only {values[0]:g} and {values[1]:g}", "pass --task classification for two classes"
        warnings.warn(
            f"{path}: the {label_name!r} labels are {pair}, trained as a regression because they are numbers; {fix}, "
            "or --task regression to keep it without this warning",
            stacklevel=3,
        )
        return f"task: regression (the {label_name!r} labels are numbers, {pair}; {fix})"
    return f"task: regression (the {label_name!r} labels are numbers; pass --task classification for classes)"


def _source(
    graphs: list[Any],
    smiles: list[str],
    description: str,
    num_classes: int,
    class_names: list[str] | None,
    counts: dict[str, int] | None,
    indices: torch.Tensor | None,
    target: dict[str, Any] | None,
    options: MoleculeOptions,
    skipped: int,
) -> MoleculeSource:
    node_dim, edge_dim = feature_sizes()  # first: it imports PyG quietly
    from torch_geometric.loader.dataloader import Collater

    def make_subset(subset: Sequence[int], transform: Callable[[Any], Any] | None) -> Dataset:
        return _Graphs([graphs[i] for i in subset])

    return MoleculeSource(
        kind="graphs",
        description=description,
        num_samples=len(graphs),
        num_classes=num_classes,
        class_names=class_names,
        make_subset=make_subset,
        in_chans=node_dim,
        collate_fn=Collater(graphs),
        class_counts=counts,
        labels=indices,
        target=target,
        smiles=smiles,
        edge_dim=edge_dim,
        split_by=options.split,
        skipped=skipped,
    )


def _graphs(path: Path, records: list[Record], skip: bool) -> tuple[list[Any], list[str], list[str], list[int]]:
    """The graphs, canonical SMILES, labels and lines of the usable records; the first bad one is
    refused by line unless ``skip`` (then they are counted, and the first few named, in a warning)."""
    from rdkit import Chem

    graphs, smiles, labels, lines, bad = [], [], [], [], []
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny tensors: one thread is 3x faster than a pool that waits for busy cores
    try:
        built = [graph_or_problem(mol) for _, mol, _ in records]
    finally:
        torch.set_num_threads(threads)
    for (line, mol, label), (graph, problem) in zip(records, built):
        if graph is None:
            if not skip:
                raise DataError(
                    f"{path}, line {line}: the molecule is not usable ({problem}); fix or remove that row, or pass "
                    "--skip-bad-rows to skip such rows and count them"
                )
            bad.append(line)
            continue
        graphs.append(graph)
        smiles.append(Chem.MolToSmiles(mol))
        labels.append(label)
        lines.append(line)
    if bad:
        shown = ", ".join(map(str, bad[:_BAD_SHOWN])) + (", ..." if len(bad) > _BAD_SHOWN else "")
        warnings.warn(f"{path}: skipped {plural(len(bad), 'unusable molecule')} (lines {shown})", stacklevel=4)
    return graphs, smiles, labels, lines


def _label_column(path: Path, names: list[str], smiles_at: int, label_field: str | None) -> int:
    """The index of the label column: ``label_field`` (any case), else the one other column."""
    lowered = [name.lower() for name in names]
    if label_field is not None:
        if label_field.lower() not in lowered:
            raise DataError(
                f"{path}: no column {clipped(label_field)!r} (--label-field); the columns are {shown_names(names)}"
            )
        if (label_at := lowered.index(label_field.lower())) == smiles_at:
            raise DataError(
                f"{path}: --label-field and --smiles-field both name {clipped(names[label_at])!r}: name two"
            )
        return label_at
    others = [i for i in range(len(names)) if i != smiles_at]
    if len(others) != 1:
        raise DataError(
            f"{path}: {plural(len(others), 'column')} besides the SMILES ({shown_names([names[i] for i in others])}); "
            "name the label with --label-field"
        )
    return others[0]


def _table_records(path: Path, label_field: str | None, smiles: str) -> tuple[list[Record], str]:
    """(line, RDKit molecule or None, label) of each row of a CSV with a header, or of a JSON
    lines file, and the label's name."""
    text = decode_text(path)
    if path.suffix.lower() == ".jsonl":
        return _jsonl_records(path, text, label_field, smiles)
    reader = csv.reader(text.splitlines())
    try:
        header = next(reader)
    except StopIteration:
        raise DataError(f"{path} is empty; expected a header naming a smiles and a label column") from None
    names = [name.strip() for name in header]
    if smiles.lower() not in [name.lower() for name in names]:
        fix = _name_it(smiles)
        raise DataError(f"{path}, line 1: no {clipped(smiles)} column in the header {shown_names(names)}; {fix}")
    smiles_at = [name.lower() for name in names].index(smiles.lower())
    label_at = _label_column(path, names, smiles_at, label_field)
    records = []
    try:
        for fields in reader:
            line = reader.line_num
            if not any(field.strip() for field in fields):
                continue
            if len(fields) != len(names):
                raise DataError(
                    f"{path}, line {line}: {plural(len(fields), 'field')} where the header has {len(names)}"
                )
            records.append((line, parse_smiles(fields[smiles_at]), fields[label_at].strip()))
    except csv.Error as error:
        raise DataError(f"{path}, line {reader.line_num}: not valid CSV ({error})") from None
    return records, names[label_at]


def _jsonl_records(path: Path, text: str, label_field: str | None, smiles: str) -> tuple[list[Record], str]:
    records, label_name = [], label_field
    for line, body in enumerate(text.splitlines(), start=1):
        if not body.strip():
            continue
        try:
            row = json.loads(body)
        except (ValueError, RecursionError):
            raise DataError(
                f"{path}, line {line}: not valid JSON; each line must be an object with smiles and a label"
            ) from None
        if not isinstance(row, dict):
            raise DataError(
                f"{path}, line {line}: not a JSON object; each line must be an object with smiles and a label"
            )
        names = list(row)
        smiles_key = next((k for k in names if k.lower() == smiles.lower()), None)
        if smiles_key is None or not isinstance(row[smiles_key], str):
            raise DataError(
                f"{path}, line {line}: no {smiles!r} string; found the keys {shown_names(names)}; {_name_it(smiles)}"
            )
        wanted = label_field or label_name
        if wanted is not None and wanted.lower() not in [name.lower() for name in names]:
            raise DataError(f"{path}, line {line}: no label {wanted!r}; found the keys {names}")
        label_key = names[_label_column(path, names, names.index(smiles_key), label_field)]
        label_name = label_name or label_key
        value = row[label_key]
        if isinstance(value, (dict, list)):
            raise DataError(f"{path}, line {line}: the label {label_key!r} must be a number or a string")
        records.append((line, parse_smiles(row[smiles_key]), "" if value is None else str(value).strip()))
    return records, label_name or "label"


def _sdf_records(path: Path, label_field: str | None) -> tuple[list[Record], str]:
    """(line where the record starts, RDKit molecule or None, label) of each record of an SDF file."""
    from rdkit import Chem

    from zoo.loading.smiles import quiet_rdkit

    text = decode_text(path)
    starts = [1] + [i + 2 for i, body in enumerate(text.splitlines()) if body.strip() == "$$$$"]
    with quiet_rdkit():
        supplier = Chem.SDMolSupplier(str(path), sanitize=True, removeHs=True)
        mols = [supplier[i] for i in range(len(supplier))]
    if label_field is None:
        fields = sorted(next((m for m in mols if m is not None), Chem.Mol()).GetPropNames())
        raise DataError(f"{path}: name the SDF data field that holds the label with --label-field (fields: {fields})")
    read = [(start, mol) for start, mol in zip(starts, mols) if mol is not None]
    if read and not any(mol.HasProp(label_field) for _, mol in read):  # a misspelt field: said once, not per record
        raise DataError(
            f"{path}, line {read[0][0]}: the record has no field {label_field!r} (--label-field); "
            f"its fields are {sorted(read[0][1].GetPropNames())}"
        )
    labels = [mol.GetProp(label_field).strip() if mol is not None and mol.HasProp(label_field) else "" for mol in mols]
    return list(zip(starts, mols, labels)), label_field  # a record without the field: no label


def _labelled(path: Path, records: list[Record], options: MoleculeOptions) -> list[Record]:
    """The records whose molecule has a label. Missing: an empty label, and where the read molecules'
    labels are numbers (or for --task regression) a marker such as ``NA`` or ``nan`` (`is_missing_marker`),
    which never decides the task; refused by line unless ``skip_bad_rows`` (then skipped, counted, warned)."""
    given = [label for _, mol, label in records if is_read(mol) and not is_missing_marker(label)]
    numeric = options.task == "regression" or all(map(is_number, given))
    kept, missing, bad_before = [], [], False  # bad_before: a bad number earlier, which `_numbers` says first
    for line, mol, label in records:
        if is_read(mol) and (not label or (numeric and is_missing_marker(label))) and not bad_before:
            if not options.skip_bad_rows:
                raise DataError(
                    f"{path}, line {line}: the label is missing ({label!r}); fill it in or remove the row, or pass "
                    "--skip-bad-rows to skip the rows without a label and count them"
                )
            missing.append(line)
            continue
        bad_before = bad_before or (numeric and is_number(label) and number_problem(label) is not None)
        kept.append((line, mol, label))
    if missing:
        shown = ", ".join(map(str, missing[:_BAD_SHOWN])) + (", ..." if len(missing) > _BAD_SHOWN else "")
        warnings.warn(f"{path}: skipped {plural(len(missing), 'row')} without a label (lines {shown})", stacklevel=4)
    return kept


def _all_numbers(labels: list[str]) -> bool:
    """Whether every label spells a number (NaN and infinities too: refused by line after)."""
    return all(is_number(label) for label in labels)


def _numbers(path: Path, labels: list[str], lines: list[int]) -> list[float]:
    """The labels as regression targets; the first that is no finite float32 number, by line."""
    values = []
    for label, line in zip(labels, lines):
        value = finite_number(label)
        if value is None:
            why = number_problem(label) if is_number(label) else f"the label {label[:40]!r} is not a number"
            raise DataError(
                f"{path}, line {line}: {why}; a regression target (chosen because the labels are numbers, or by "
                "--task regression) needs finite numbers: fix or drop the row, or pass --task classification"
            )
        values.append(value)
    return values


def _refuse_missing_values(path: Path, labels: list[str], lines: list[int]) -> None:
    """Refuse a NaN or infinite label among class names: a missing value, not a class."""
    for label, line in zip(labels, lines):
        if is_number(label) and not math.isfinite(float(label)):
            raise DataError(
                f"{path}, line {line}: {number_problem(label)}, a missing value rather than a class; fill it "
                "in or drop the row, or pass --task classification to keep it as a class"
            )


def _class_order(name: str) -> tuple[int, float, str]:
    """Numeric class names in numeric order, then the others alphabetically."""
    value = finite_number(name)
    return (0, value, name) if value is not None else (1, 0.0, name)


def scaffold_split(smiles: Sequence[str], val_fraction: float, seed: int) -> tuple[list[int], list[int]]:
    """Training and validation indices whose molecules share no Bemis–Murcko scaffold
    (Chemprop's balanced scaffold split): scaffold sets larger than half the validation size
    go to training, the others, in a seeded shuffle, fill validation up to ``val_fraction``."""
    from rdkit.Chem.Scaffolds import MurckoScaffold

    groups: dict[str, list[int]] = {}
    for i, text in enumerate(smiles):
        key = MurckoScaffold.MurckoScaffoldSmiles(smiles=text, includeChirality=False)
        groups.setdefault(key, []).append(i)
    num_val = max(1, round(len(smiles) * val_fraction))
    sets = list(groups.values())
    big = [s for s in sets if len(s) > num_val / 2]
    small = [s for s in sets if len(s) <= num_val / 2]
    order = torch.randperm(len(small), generator=torch.Generator().manual_seed(seed)).tolist()
    train = [i for s in big for i in s]
    val: list[int] = []
    for k in order:
        (val if len(val) + len(small[k]) <= num_val else train).extend(small[k])
    return sorted(train), sorted(val)
