"""The molecule pretraining corpus (`zoo.training.data.molecules.corpus`): a fake wheel with the
MOSES member layout and real SMILES (RDKit's NCI file), served from 127.0.0.1, checks the
verified download, the local wheel's check, the seeded sample, the bounds, and the descriptor
targets against RDKit's own calls; one test reads the real wheel when /tmp/wh holds it."""

from __future__ import annotations

import dataclasses
import gzip
import hashlib
import io
import math
import zipfile
from pathlib import Path

import numpy as np
import pytest

from zoo.errors import ChecksumError, DataError, InvalidArgumentError, WeightsNotFoundError
from zoo.training.data.molecules import corpus as corpus_module
from zoo.training.data.molecules.corpus import (
    MOSES,
    corpus_file,
    corpus_smiles,
    descriptor_names,
    descriptor_targets,
)

pytest.importorskip("rdkit")
REAL_WHEEL = Path("/tmp/wh/molsets-0.3.1-py3-none-any.whl")


def nci_smiles(count: int = 40) -> list[str]:
    """The first ``count`` SMILES of RDKit's ``Data/NCI/first_200.tpsa.csv``."""
    from zoo.training.data.molecules.molecule_sets import rdkit_root

    text = (rdkit_root() / "Data" / "NCI" / "first_200.tpsa.csv").read_text()
    rows = [line.rsplit(",", 1)[0] for line in text.splitlines() if line.strip() and not line.startswith("#")]
    return rows[:count]


def member_bytes(lines: list[str], header: str = "SMILES") -> bytes:
    return gzip.compress(("\n".join([header, *lines]) + "\n").encode(), mtime=0)  # the same bytes at every call


def fake_wheel(members: dict[str, bytes] | None = None) -> bytes:
    """A zip laid out like the molsets wheel: the three members, gzip CSVs of real SMILES."""
    smiles = nci_smiles()
    members = members or {
        "train": member_bytes(smiles[:30]),
        "test": member_bytes(smiles[30:35]),
        "test_scaffolds": member_bytes(smiles[35:]),
    }
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("moses/__init__.py", "")
        for entry in MOSES.members:
            archive.writestr(entry.path, members[entry.name])
    return buffer.getvalue()


def fake_corpus(url: str, data: bytes, sha256: str | None = None) -> corpus_module.Corpus:
    return dataclasses.replace(MOSES, url=url, sha256=sha256 or hashlib.sha256(data).hexdigest(), size=len(data))


def write(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


def test_download_is_verified_once_into_zoos_cache(http_server, zoo_home):
    data = fake_wheel()
    corpus = fake_corpus(http_server.add("molsets-fake.whl", data), data)
    path = corpus_file(corpus=corpus, progress=False)
    assert path == zoo_home / "downloads" / "molsets-fake.whl" and path.read_bytes() == data
    assert corpus_file(corpus=corpus, progress=False) == path
    assert http_server.requests == ["/molsets-fake.whl"]  # downloaded once


@pytest.mark.parametrize("into", ["zoo cache", "cache_dir"])
def test_a_download_with_the_wrong_sha256_is_refused_and_leaves_no_file(http_server, zoo_home, tmp_path, into):
    data = fake_wheel()
    corpus = fake_corpus(http_server.add("molsets-fake.whl", data), data, sha256="0" * 64)
    folder = zoo_home / "downloads" if into == "zoo cache" else tmp_path / "cache"
    with pytest.raises(ChecksumError, match="0" * 64):
        corpus_file(cache_dir=None if into == "zoo cache" else folder, corpus=corpus, progress=False)
    assert not folder.exists() or list(folder.iterdir()) == []  # no wheel, no .part file


def test_cache_dir_downloads_once_and_replaces_a_corrupt_copy(http_server, tmp_path):
    data = fake_wheel()
    corpus = fake_corpus(http_server.add("molsets-fake.whl", data), data)
    path = corpus_file(cache_dir=tmp_path / "cache", corpus=corpus, progress=False)
    assert path == tmp_path / "cache" / "molsets-fake.whl" and path.read_bytes() == data
    assert corpus_file(cache_dir=tmp_path / "cache", corpus=corpus, progress=False) == path
    assert len(http_server.requests) == 1
    write(path, bytes(len(data)))  # same size, other bytes
    with pytest.warns(UserWarning, match="Downloading it again"):
        assert corpus_file(cache_dir=tmp_path / "cache", corpus=corpus, progress=False).read_bytes() == data
    assert len(http_server.requests) == 2


def test_offline_says_how_to_bring_the_wheel(monkeypatch, http_server):
    monkeypatch.setenv("ZOO_OFFLINE", "1")
    data = fake_wheel()
    corpus = fake_corpus(http_server.add("molsets-fake.whl", data), data)
    with pytest.raises(WeightsNotFoundError, match=r"ZOO_OFFLINE=1.*wheel=PATH"):
        corpus_file(corpus=corpus, progress=False)
    assert http_server.requests == []


def test_a_local_wheel_with_the_wrong_hash_is_refused_naming_the_file(tmp_path):
    data = fake_wheel()
    corpus = fake_corpus("https://example.invalid/molsets-fake.whl", data)
    good = write(tmp_path / "good.whl", data)
    assert corpus_file(wheel=good, corpus=corpus) == good
    other = write(tmp_path / "other.whl", data[:-1] + bytes([data[-1] ^ 1]))  # same size
    with pytest.raises(ChecksumError) as error:
        corpus_file(wheel=other, corpus=corpus)
    assert str(other) in str(error.value) and corpus.sha256 in str(error.value)
    with pytest.raises(ChecksumError, match=rf"{tmp_path / 'short.whl'}.*bytes, not"):
        corpus_file(wheel=write(tmp_path / "short.whl", data[:100]), corpus=corpus)
    with pytest.raises(DataError, match="no such file"):
        corpus_file(wheel=tmp_path / "missing.whl", corpus=corpus)


def test_the_real_entry_refuses_a_wheel_that_is_not_it(tmp_path):
    with pytest.raises(ChecksumError, match=MOSES.sha256):
        corpus_file(wheel=write(tmp_path / MOSES.filename, fake_wheel()))


def test_every_smiles_of_a_member_in_order(tmp_path):
    wheel = write(tmp_path / "w.whl", fake_wheel())
    train = corpus_smiles(wheel)
    assert train.smiles == nci_smiles()[:30] and (train.lines, train.skipped) == (30, 0)
    assert corpus_smiles(wheel, "test_scaffolds").smiles == nci_smiles()[35:]
    with pytest.raises(InvalidArgumentError, match="'test_scaffolds'"):
        corpus_smiles(wheel, "valid")


# The sample of limit 5, seed 0 from the fake train member: BLAKE2b's, the same on every machine.
GOLDEN_SAMPLE = [8, 9, 14, 17, 23]


def test_the_sample_is_seeded_and_the_same_on_every_machine(tmp_path):
    wheel = write(tmp_path / "w.whl", fake_wheel())
    every = nci_smiles()[:30]
    five = corpus_smiles(wheel, limit=5, seed=0)
    assert five.smiles == [every[i] for i in GOLDEN_SAMPLE]
    assert corpus_smiles(wheel, limit=5, seed=0) == five
    assert corpus_smiles(wheel, limit=5, seed=1).smiles != five.smiles
    ten = corpus_smiles(wheel, limit=10, seed=0).smiles
    assert set(five.smiles) < set(ten) and ten == [s for s in every if s in ten]  # nested, in file order
    assert corpus_smiles(wheel, limit=1000).smiles == every
    for bad in (0, -1, 2.5, True):
        with pytest.raises(InvalidArgumentError, match="limit="):
            corpus_smiles(wheel, limit=bad)


def test_decompressed_bytes_are_bounded(tmp_path):
    bomb = gzip.compress(b"SMILES\n" + b"C\n" * 2_000_000)  # 4 MB that compress to a few KB
    wheel = write(tmp_path / "w.whl", fake_wheel({"train": bomb, "test": bomb, "test_scaffolds": bomb}))
    assert len(wheel.read_bytes()) < 100_000
    with pytest.raises(DataError, match=r"more than 1,000,000 bytes decompressed.*max_bytes"):
        corpus_smiles(wheel, max_bytes=1_000_000)
    no_newline = gzip.compress(b"SMILES\n" + b"C" * 3_000_000)  # one endless line
    wheel = write(tmp_path / "v.whl", fake_wheel({"train": no_newline, "test": bomb, "test_scaffolds": bomb}))
    with pytest.raises(DataError, match="max_bytes"):
        corpus_smiles(wheel, max_bytes=1_000_000)


def test_lines_that_are_no_smiles_are_skipped_and_counted(tmp_path):
    lines = ["CCO", "C" * 301, "", "CC O", "c1ccccc1\u00e9", "C" * 300, "CCN\r"]
    data = gzip.compress(("\n".join(["SMILES", *lines])).encode())  # no newline at the end
    wheel = write(tmp_path / "w.whl", fake_wheel({"train": data, "test": data, "test_scaffolds": data}))
    read = corpus_smiles(wheel)
    assert read.smiles == ["CCO", "C" * 300, "CCN"] and (read.lines, read.skipped) == (7, 4)


@pytest.mark.parametrize(
    ("train", "problem"),
    [(member_bytes(["CCO"], header="smiles,label"), "not the header line 'SMILES'"), (b"not gzip", "cannot be read")],
    ids=["another header", "not gzip"],  # ids of the bytes would differ between xdist workers' collections
)
def test_a_member_that_is_not_the_corpus_is_refused(tmp_path, train, problem):
    wheel = write(tmp_path / "w.whl", fake_wheel({"train": train, "test": train, "test_scaffolds": train}))
    with pytest.raises(DataError, match=problem):
        corpus_smiles(wheel)


def test_a_file_that_is_not_the_wheel_is_refused(tmp_path):
    with pytest.raises(DataError, match="missing.whl: no such file") as error:
        corpus_smiles(tmp_path / "missing.whl")
    assert "corrupt" not in str(error.value)
    with pytest.raises(DataError, match="not a zip file"):
        corpus_smiles(write(tmp_path / "w.whl", b"hello"))
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("other.txt", "x")
    with pytest.raises(DataError, match="has no moses/dataset/data/train.csv.gz"):
        corpus_smiles(write(tmp_path / "z.whl", buffer.getvalue()))


def test_descriptors_equal_rdkits_own_calls():
    from rdkit import Chem
    from rdkit.Chem import Descriptors

    smiles = nci_smiles(12)
    targets = descriptor_targets(smiles, progress=False)
    assert targets.names == descriptor_names() and targets.values.dtype == np.float64
    assert targets.values.shape == (12, len(Descriptors.descList)) and targets.kept.tolist() == list(range(12))
    for row, text in enumerate(smiles):
        mol = Chem.MolFromSmiles(text)
        expected = [getattr(Descriptors, name)(mol) for name in targets.names]
        assert targets.present[row].all()
        np.testing.assert_array_equal(targets.values[row], expected)


def test_exclude_leaves_a_downstream_target_out():
    all_names = descriptor_names()
    targets = descriptor_targets(["CCO", "c1ccccc1O"], exclude=["TPSA"], progress=False)
    assert "TPSA" not in targets.names and len(targets.names) == len(all_names) - 1
    chosen = descriptor_targets(["CCO"], names=["MolWt", "TPSA", "NumHDonors"], exclude="TPSA", progress=False)
    assert chosen.names == ("MolWt", "NumHDonors") and chosen.values.shape == (1, 2)
    with pytest.raises(InvalidArgumentError, match="no descriptor 'TSPA'; did you mean TPSA"):
        descriptor_targets(["CCO"], exclude=["TSPA"])  # a typo must not keep the target in
    with pytest.raises(InvalidArgumentError, match="leave no descriptor"):
        descriptor_targets(["CCO"], names=["TPSA"], exclude=["TPSA"])


def test_a_bad_smiles_is_counted_and_dropped():
    smiles = ["CCO", "C1CC(", "c1ccccc1O", "CC O", ""]
    targets = descriptor_targets(smiles, names=["MolWt"], progress=False)
    assert targets.kept.tolist() == [0, 2] and targets.values.shape == (2, 1)
    assert [index for index, _ in targets.dropped] == [1, 3, 4]
    assert "RDKit cannot parse it" in targets.dropped[0][1] and "space" in targets.dropped[1][1]
    with pytest.raises(InvalidArgumentError, match="a list of SMILES"):
        descriptor_targets("CCO")


def test_a_value_that_is_not_finite_or_absurd_is_missing_never_zero(monkeypatch):
    from rdkit.Chem import Descriptors

    def fails(mol: object) -> float:
        raise ValueError("no value")

    fakes = [("Inf", lambda m: math.inf), ("Huge", lambda m: 1e30), ("Fails", fails), ("NaN", lambda m: math.nan)]
    monkeypatch.setattr(Descriptors, "descList", [*Descriptors.descList, *fakes])
    targets = descriptor_targets(["CCO", "CCN"], names=["MolWt", "Inf", "Huge", "Fails", "NaN"], progress=False)
    assert targets.present.tolist() == [[True, False, False, False, False]] * 2
    assert np.isnan(targets.values[:, 1:]).all() and (targets.values[:, 0] > 40).all()
    assert targets.missing == {"Inf": 2, "Huge": 2, "Fails": 2, "NaN": 2}


def test_worker_processes_give_the_same_targets(monkeypatch):
    monkeypatch.setattr(corpus_module, "CHUNK", 4)  # 3 tasks for 2 workers
    smiles = [*nci_smiles(10), "C1CC("]
    one = descriptor_targets(smiles, names=["MolWt", "TPSA", "qed"], progress=False)
    two = descriptor_targets(smiles, names=["MolWt", "TPSA", "qed"], processes=2, progress=False)
    np.testing.assert_array_equal(one.values, two.values)
    assert one.kept.tolist() == two.kept.tolist() == list(range(10)) and one.dropped == two.dropped


@pytest.mark.skipif(not REAL_WHEEL.is_file(), reason=f"the real MOSES wheel is not at {REAL_WHEEL}")
def test_the_real_wheel_holds_the_stated_molecules():
    wheel = corpus_file(wheel=REAL_WHEEL)
    for entry in MOSES.members:
        read = corpus_smiles(wheel, entry.name, limit=1000 if entry.name == "train" else None)
        assert (read.lines, read.skipped) == (entry.molecules, 0), entry.name
        assert len(read.smiles) == (1000 if entry.name == "train" else entry.molecules)
        if entry.name == "train":
            targets = descriptor_targets(read.smiles[:20], exclude=["TPSA"], progress=False)
            assert targets.values.shape == (20, len(descriptor_names()) - 1) and not targets.dropped
