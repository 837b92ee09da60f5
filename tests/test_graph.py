"""Graph models: third- and second-order pooling against brute force, permutation invariance,
gradients, AddTriangles against networkx (single graphs and batches), the datasets, the
TUDataset path on files written here, a short triangle-counting run where the triangle
readout beats sum pooling, heads, the model contract and errors on bad input."""

from __future__ import annotations

import itertools
import json
import time
from pathlib import Path

import networkx as nx
import pytest
import torch
from torch_geometric.data import Batch, Data
from torch_geometric.loader import DataLoader
from torch_geometric.nn import SimpleConv, SumAggregation
from torch_geometric.utils import scatter, to_undirected

import zoo
from zoo.architectures.graph import (
    AddTriangles,
    BatchRenorm,
    SecondOrderPooling,
    SumReadout,
    ThirdOrderPooling,
    triangles,
)
from zoo.errors import InvalidArgumentError, ZooError
from zoo.training.data.builtin import FASHION_MNIST_DIR, load_fashion_mnist
from zoo.training.data.graphs.generated_graphs import (
    FashionMNISTGraphs,
    MotifClassification,
    TriangleCounting,
    load_tu_dataset,
    normalized_mse,
    random_split,
)

NAMES = ("gin_sum", "gin_sopool", "gin3")
HEADS = ("graph_classification", "graph_regression", "node_classification")


def _random_graph(num_nodes: int, p: float, seed: int, channels: int = 3) -> Data:
    graph = nx.gnp_random_graph(num_nodes, p, seed=seed)
    edges = torch.tensor(list(graph.edges()), dtype=torch.long).reshape(-1, 2).t()
    x = torch.randn(num_nodes, channels, generator=torch.Generator().manual_seed(seed))
    return AddTriangles()(Data(x=x, edge_index=to_undirected(edges, num_nodes=num_nodes), num_nodes=num_nodes))


def _batch(channels: int = 3) -> Batch:
    return Batch.from_data_list([_random_graph(n, 0.4, seed, channels) for seed, n in enumerate((7, 9, 5, 8))])


def _networkx_triangles(data: Data) -> list[tuple[int, ...]]:
    """Brute force: every node triple whose three edges exist, checked against networkx's count."""
    graph = nx.Graph()
    graph.add_nodes_from(range(data.num_nodes))
    graph.add_edges_from((u, v) for u, v in data.edge_index.t().tolist() if u != v)
    found = [
        t
        for t in itertools.combinations(range(data.num_nodes), 3)
        if all(graph.has_edge(a, b) for a, b in itertools.combinations(t, 2))
    ]
    assert len(found) == sum(nx.triangles(graph).values()) // 3
    return found


def _permute(batch: Batch, seed: int) -> Batch:
    """The same graphs with all nodes of the batch shuffled (x, batch and every index remapped)."""
    perm = torch.randperm(batch.num_nodes, generator=torch.Generator().manual_seed(seed))
    new_id = torch.empty_like(perm)
    new_id[perm] = torch.arange(perm.numel())
    out = batch.clone()
    out.x, out.batch = batch.x[perm], batch.batch[perm]
    out.edge_index, out.triangle_index = new_id[batch.edge_index], new_id[batch.triangle_index]
    return out


# --- pooling -------------------------------------------------------------------------------


def _all_parts(channels: int, **kwargs) -> ThirdOrderPooling:
    return ThirdOrderPooling(
        channels, rank=5, moment=True, triangle=True, first_order=True, second_order=True, bilinear=2, **kwargs
    )


@pytest.mark.parametrize("reduce", ["sum", "mean"])
def test_readouts_are_permutation_invariant(reduce):
    torch.manual_seed(0)
    batch = _batch()
    for pool in (_all_parts(3, reduce=reduce), SecondOrderPooling(3, 4, reduce=reduce)):
        kwargs = {"triangle_index": batch.triangle_index} if isinstance(pool, ThirdOrderPooling) else {}
        expected = pool(batch.x, batch.batch, **kwargs)
        assert expected.shape == (4, pool.out_channels)
        assert expected.abs().max() > 1e-3
        for seed in range(3):
            permuted = _permute(batch, seed)
            kwargs = {"triangle_index": permuted.triangle_index} if kwargs else {}
            torch.testing.assert_close(pool(permuted.x, permuted.batch, **kwargs), expected, rtol=1e-5, atol=1e-5)


def test_model_is_permutation_invariant():
    torch.manual_seed(0)
    batch = _batch(channels=2)
    model = zoo.load("gin3", pretrained=False, in_channels=2, num_classes=3, second_order=True)
    model.train()
    model(batch)  # sets the readout normalisation's statistics
    model.eval()
    with torch.no_grad():
        expected = model(batch)
        torch.testing.assert_close(model(_permute(batch, 1)), expected, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("center", [False, True])
@pytest.mark.parametrize("reduce", ["sum", "mean"])
def test_moment_equals_brute_force_third_order_tensor(center, reduce):
    torch.manual_seed(0)
    d, rank = 4, 3
    x = torch.randn(11, d, dtype=torch.float64)
    index = torch.tensor([0] * 4 + [1] * 7)
    pool = ThirdOrderPooling(d, rank, center=center, reduce=reduce, normalize=False).double()
    u, v, w = pool.factors.weight.view(3, rank, d)
    expected = []
    for g in range(2):
        h = x[index == g]
        if center:
            h = h - h.mean(0)
        tensor = torch.einsum("ia,ib,ic->abc", h, h, h)  # the d^3 moment tensor
        if reduce == "mean":
            tensor = tensor / len(h)
        expected.append(torch.einsum("abc,ka,kb,kc->k", tensor, u, v, w))
    expected = torch.stack(expected)
    torch.testing.assert_close(pool(x, index), expected)

    normalized = ThirdOrderPooling(d, rank, center=center, reduce=reduce, eps=0.0).double()
    normalized.load_state_dict(pool.state_dict())
    root = expected.sign() * expected.abs() ** (1 / 3)
    torch.testing.assert_close(normalized(x, index), root / root.norm(dim=1, keepdim=True))


def test_second_order_parts_equal_brute_force():
    torch.manual_seed(0)
    x = torch.randn(9, 4, dtype=torch.float64)
    index = torch.tensor([0] * 5 + [1] * 4)
    sopool = SecondOrderPooling(4, 3).double()
    third = ThirdOrderPooling(4, 2, moment=False, second_order=True, center=False, normalize=False).double()
    p, q = third.factors.weight.view(2, 2, 4)
    for g in range(2):
        h = x[index == g]
        gram = h.t() @ h
        weight = sopool.proj.weight.t()
        torch.testing.assert_close(sopool(x, index)[g], (weight.t() @ gram @ weight).flatten())
        torch.testing.assert_close(third(x, index)[g], torch.einsum("ab,ka,kb->k", gram, p, q))
    # the bilinear part is SOPool's readout, after the sum and before the other parts
    both = ThirdOrderPooling(4, 2, first_order=True, bilinear=3).double()
    both.bilinear.load_state_dict(sopool.state_dict())
    assert both.lower_channels == 4 + 9 and both.out_channels == 4 + 9 + 2
    torch.testing.assert_close(both(x, index)[:, 4:13], sopool(x, index))


@pytest.mark.parametrize("reduce", ["sum", "mean"])
@pytest.mark.parametrize("sizes", [[3, 0, 5, 2], [40, 1, 1, 1, 1, 1]], ids=["contiguous", "padded_too_much"])
def test_sopool_batched_product_equals_the_node_by_node_sum(sizes, reduce, monkeypatch):
    """The one-bmm path (contiguous graphs, an empty one among them) and the node-by-node path it
    steps aside for (a batch that padding would blow up) give the same numbers and gradients."""
    torch.manual_seed(0)
    pool = SecondOrderPooling(6, 3, reduce=reduce).double()
    index = torch.repeat_interleave(torch.arange(len(sizes)), torch.tensor(sizes))
    x = torch.randn(index.numel(), 6, dtype=torch.float64, requires_grad=True)
    g = pool.proj(x)
    batched = pool._batched(g, index, len(sizes))
    assert (batched is None) == (sizes[0] == 40)
    out = pool(x, index, dim_size=len(sizes))
    expected = scatter((g.unsqueeze(2) * g.unsqueeze(1)).flatten(1), index, 0, len(sizes), reduce)
    torch.testing.assert_close(out, expected)
    if sizes[0] != 40:  # dim_size short of the graphs: refused as the node-by-node path refuses it
        assert pool._batched(g, index, len(sizes) - 1) is None
    (grad,) = torch.autograd.grad(out.square().sum(), x)
    (expected_grad,) = torch.autograd.grad(expected.square().sum(), x)
    torch.testing.assert_close(grad, expected_grad)


def test_triangle_part_sums_symmetric_function_over_triangles():
    torch.manual_seed(0)
    data = _random_graph(9, 0.5, seed=3)
    pool = ThirdOrderPooling(3, 4, moment=False, triangle=True)
    phi = torch.tanh(pool.phi(data.x))
    expected = sum(phi[i] * phi[j] * phi[k] for i, j, k in _networkx_triangles(data))
    torch.testing.assert_close(pool(data.x, triangle_index=data.triangle_index)[0], expected)
    # The function is symmetric: any order of the three nodes gives the same readout.
    shuffled = data.triangle_index[torch.tensor([2, 0, 1])]
    torch.testing.assert_close(pool(data.x, triangle_index=shuffled)[0], expected)


def test_pooling_gradients_fp64():
    torch.manual_seed(0)
    batch = Batch.from_data_list([_random_graph(5, 0.7, seed, channels=3) for seed in (1, 2)])
    assert batch.triangle_index.size(1) > 0
    x = batch.x.double().requires_grad_()
    pool = _all_parts(3).double()
    assert torch.autograd.gradcheck(lambda x: pool(x, batch.batch, triangle_index=batch.triangle_index), (x,))
    sopool = SecondOrderPooling(3, 2).double()
    assert torch.autograd.gradcheck(lambda x: sopool(x, batch.batch), (x,))
    # And parameters receive gradients.
    pool(x, batch.batch, triangle_index=batch.triangle_index).square().sum().backward()
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in pool.parameters())


def test_pooling_works_as_message_passing_aggregation_and_with_ptr():
    torch.manual_seed(0)
    pool = ThirdOrderPooling(3, rank=4, first_order=True)
    data = _random_graph(8, 0.5, seed=0)
    out = SimpleConv(aggr=pool)(data.x, data.edge_index)
    src, dst = data.edge_index
    node = int(dst[0])
    torch.testing.assert_close(out[node], pool(data.x[src[dst == node]])[0])
    batch = _batch()
    torch.testing.assert_close(pool(batch.x, ptr=batch.ptr), pool(batch.x, batch.batch))


# PyG's own aggregation tests script each aggregation and compare it with eager; zoo's readouts
# pass the same check, and torch.compile captures them whole when dim_size is given (as PyG's
# own: without it, PyG's __call__ reads the graph count from the data itself).
READOUTS = [
    pytest.param(lambda: _all_parts(3), id="third_order_all_parts"),
    pytest.param(
        lambda: ThirdOrderPooling(3, rank=4, triangle=True, reduce="mean", center=False), id="third_order_mean"
    ),
    pytest.param(lambda: SecondOrderPooling(3, 4), id="second_order"),
    pytest.param(lambda: SumReadout(3), id="sum"),
]


def _readout_inputs(pool: torch.nn.Module) -> tuple[Batch, dict[str, torch.Tensor]]:
    batch = _batch()
    assert batch.triangle_index.size(1) > 0
    return batch, {"triangle_index": batch.triangle_index} if getattr(pool, "triangle", False) else {}


@pytest.mark.usefixtures("one_thread")
@pytest.mark.filterwarnings("ignore:`torch.jit.script` is deprecated:FutureWarning")
@pytest.mark.parametrize("make", READOUTS)
def test_readouts_script_as_pyg_aggregations_do(make):
    torch.manual_seed(0)
    pool = make()
    batch, kwargs = _readout_inputs(pool)
    expected = pool(batch.x, batch.batch, **kwargs)
    scripted = torch.jit.script(pool)
    torch.testing.assert_close(scripted(batch.x, batch.batch, **kwargs), expected)
    torch.testing.assert_close(scripted(batch.x, ptr=batch.ptr, dim_size=batch.num_graphs, **kwargs), expected)
    torch.testing.assert_close(
        torch.jit.script(SumAggregation())(batch.x, batch.batch), SumAggregation()(batch.x, batch.batch)
    )


@pytest.mark.usefixtures("one_thread")
@pytest.mark.parametrize("make", READOUTS)
def test_readouts_compile_without_graph_breaks(make):
    torch.manual_seed(0)
    pool = make()
    batch, kwargs = _readout_inputs(pool)
    torch._dynamo.reset()
    explained = torch._dynamo.explain(pool)(batch.x, batch.batch, dim_size=batch.num_graphs, **kwargs)
    assert (explained.graph_count, explained.graph_break_count) == (1, 0), explained.break_reasons
    compiled = torch.compile(pool, backend="eager", fullgraph=True)
    torch.testing.assert_close(
        compiled(batch.x, batch.batch, dim_size=batch.num_graphs, **kwargs), pool(batch.x, batch.batch, **kwargs)
    )


def test_readout_options_are_refused_with_zoo_errors():
    for make in (
        lambda: ThirdOrderPooling(3, moment=False),
        lambda: ThirdOrderPooling(3, reduce="max"),
        lambda: ThirdOrderPooling(3, rank=0),
        lambda: SecondOrderPooling(3, reduce="max"),
        lambda: ThirdOrderPooling(3, bilinear=-1),
        lambda: ThirdOrderPooling(3, bilinear=True),
    ):
        with pytest.raises(InvalidArgumentError):
            make()
    # a switch read from a config file is a bool: "no" or 2 would switch a part on silently
    for name, value in (("l2", "no"), ("first_order", 2), ("moment", "x"), ("start_as_sum", [1]), ("train_eps", 0)):
        with pytest.raises(InvalidArgumentError, match=f"{name} must be true or false, got"):
            zoo.load("gin3", pretrained=False, **{name: value})


def test_a_saved_gin3_whose_config_switches_are_not_bools_is_refused_naming_the_file(tmp_path):
    folder = zoo.save(zoo.load("gin3", pretrained=False, in_channels=3), tmp_path / "g")
    config = json.loads((folder / "config.json").read_text())
    for key in ("l2", "virtual_node"):
        changed = {**config, "model_kwargs": {**config["model_kwargs"], key: "no"}}
        (folder / "config.json").write_text(json.dumps(changed))
        with pytest.raises(ZooError, match=f"{key} must be true or false") as caught:
            zoo.load(folder)
        assert "config.json" in str(caught.value)


# --- AddTriangles --------------------------------------------------------------------------


def test_add_triangles_equals_networkx():
    for seed, (n, p) in enumerate([(1, 0.5), (6, 0.0), (12, 0.3), (25, 0.5), (40, 0.9)]):
        data = _random_graph(n, p, seed)
        assert data.triangle_index.shape[0] == 3 and data.triangle_index.dtype == torch.long
        assert [tuple(t) for t in data.triangle_index.t().tolist()] == _networkx_triangles(data)
    # Direction, duplicate edges and self-loops are ignored.
    messy = Data(edge_index=torch.tensor([[0, 1, 1, 2, 2, 0, 3], [1, 0, 2, 0, 0, 0, 3]]), num_nodes=4)
    assert triangles(messy.edge_index, 4).tolist() == [[0], [1], [2]]


def test_add_triangles_batches_with_node_offsets():
    graphs = [_random_graph(n, 0.5, seed) for seed, n in enumerate((6, 10, 3, 8, 12))]
    for batch in (Batch.from_data_list(graphs), next(iter(DataLoader(graphs, batch_size=5)))):
        offsets = batch.ptr[:-1].repeat_interleave(torch.tensor([g.triangle_index.size(1) for g in graphs]))
        expected = torch.cat([g.triangle_index for g in graphs], dim=1) + offsets
        assert torch.equal(batch.triangle_index, expected)
        # Listing triangles of the whole batch at once gives the same triangles.
        assert torch.equal(AddTriangles()(batch.clone()).triangle_index, expected)
        counts = torch.bincount(batch.batch[batch.triangle_index[0]], minlength=len(graphs))
        assert counts.tolist() == [len(_networkx_triangles(g)) for g in graphs]
        assert [len(_networkx_triangles(g)) for g in batch.to_data_list()] == counts.tolist()


def test_add_triangles_many_equals_one_graph_at_a_time():
    """`AddTriangles.many` lists triangles on chunks of graphs joined into one: same result as
    the transform on each graph, across chunk boundaries and for graphs without edges; the
    inputs are left as they were."""
    graphs = [
        _random_graph(n, p, seed) for seed, (n, p) in enumerate([(6, 0.6), (1, 0.5), (9, 0.0), (12, 0.4), (7, 0.9)])
    ]
    for data in graphs:
        del data.triangle_index
    done = AddTriangles().many(graphs, chunk=2)
    assert all("triangle_index" not in data for data in graphs)
    for data, result in zip(graphs, done):
        assert torch.equal(result.triangle_index, AddTriangles()(data).triangle_index)
    with pytest.raises(ValueError, match="known number of nodes"):
        AddTriangles().many([Data(x=torch.ones(2, 1))])


# --- datasets ------------------------------------------------------------------------------


def test_triangle_counting_is_deterministic_with_disjoint_splits():
    train = TriangleCounting("regular", "train", num_graphs=40, seed=1)
    again = TriangleCounting("regular", "train", num_graphs=40, seed=1)
    test = TriangleCounting("regular", "test", num_graphs=40, seed=1)
    assert (len(train), len(TriangleCounting("regular", "val", num_graphs=40, seed=1)), len(test)) == (12, 8, 20)
    assert torch.equal(train.y, again.y) and torch.equal(train.edge_index, again.edge_index)
    assert not torch.equal(train.y, TriangleCounting("regular", "train", num_graphs=40, seed=2).y)
    for data in [*train, *test]:
        assert data.num_nodes in (10, 15, 20, 30) and data.x.shape == (data.num_nodes, 1)
        assert int(data.y) == len(_networkx_triangles(data))
    er = TriangleCounting("er", "test", num_graphs=40, pre_transform=AddTriangles())
    assert all(d.num_nodes == 10 and d.triangle_index.size(1) == int(d.y) for d in er)
    with pytest.raises(ValueError, match="kind must be"):
        TriangleCounting("grid")


def test_motif_classification_house_vs_cycle():
    data = MotifClassification("train", num_graphs=40, seed=0, pre_transform=AddTriangles())
    again = MotifClassification("train", num_graphs=40, seed=0)
    assert len(data) == 32 and torch.equal(data.y, again.y) and 0 < int(data.y.sum()) < 32
    for graph in data:
        # A BA tree plus a house (one triangle, its roof) or a 5-cycle (none).
        assert graph.num_nodes == 25
        assert graph.triangle_index.size(1) == (1 if int(graph.y) == 0 else 0)


@pytest.mark.skipif(not FASHION_MNIST_DIR.is_dir(), reason="Fashion-MNIST is not installed")
def test_fashion_mnist_pixel_graphs():
    data = FashionMNISTGraphs("test", num_graphs=20, size=14, seed=0)
    assert len(data) == 20 and data.num_features == 3 and data.y.dtype == torch.long
    graph = data[0]
    assert 0 < graph.num_nodes <= 196 and (graph.x[:, 0] > 0.1).all()
    # 8-neighbourhood: neighbours differ by at most one row and one column.
    step = (graph.pos[graph.edge_index[0]] - graph.pos[graph.edge_index[1]]).abs()
    assert graph.num_edges > 0 and step.max() == 1
    assert AddTriangles()(graph.clone()).triangle_index.size(1) > 0
    first = FashionMNISTGraphs("test", num_graphs=5, seed=None)  # seed None: the first images, in order
    assert torch.equal(first.y, load_fashion_mnist("test")[1][:5])
    with pytest.raises(ValueError, match="size must divide 28"):
        FashionMNISTGraphs("test", num_graphs=2, size=5)


def _write_tu_dataset(raw: Path, name: str, node_labels: bool) -> list[tuple[int, list[tuple[int, int]]]]:
    """Three small graphs in TU format (1-based ids, both directions of each edge)."""
    graphs = [
        (0, [(0, 1), (1, 2), (2, 0)]),
        (1, [(0, 1), (1, 2), (2, 3)]),
        (0, [(0, 1), (1, 2), (2, 0), (2, 3), (3, 0)]),
    ]
    sizes = [3, 4, 4]
    raw.mkdir(parents=True)
    edges, indicator, offset = [], [], 0
    for g, ((_, graph_edges), size) in enumerate(zip(graphs, sizes)):
        for u, v in graph_edges:
            edges += [(u + offset + 1, v + offset + 1), (v + offset + 1, u + offset + 1)]
        indicator += [g + 1] * size
        offset += size
    (raw / f"{name}_A.txt").write_text("".join(f"{u}, {v}\n" for u, v in edges))
    (raw / f"{name}_graph_indicator.txt").write_text("".join(f"{g}\n" for g in indicator))
    (raw / f"{name}_graph_labels.txt").write_text("".join(f"{2 * label - 1}\n" for label, _ in graphs))
    if node_labels:
        (raw / f"{name}_node_labels.txt").write_text("".join(f"{i % 3}\n" for i in range(offset)))
    return graphs


def test_tu_dataset_loads_from_raw_folder_without_download(tmp_path):
    graphs = _write_tu_dataset(tmp_path / "TINY" / "raw", "TINY", node_labels=True)
    dataset = load_tu_dataset("TINY", root=tmp_path, pre_transform=AddTriangles())
    assert len(dataset) == 3 and dataset.num_node_features == 3 and dataset.num_classes == 2
    assert dataset.y.tolist() == [label for label, _ in graphs]
    assert [d.triangle_index.size(1) for d in dataset] == [1, 0, 2]
    model = zoo.load("gin3", pretrained=False, in_channels=dataset.num_features, num_classes=dataset.num_classes)
    assert model(next(iter(DataLoader(dataset, batch_size=3)))).shape == (3, 2)
    train, val, test = random_split(dataset, (1, 1, 1), seed=0)
    assert sorted([*train.y.tolist(), *val.y.tolist(), *test.y.tolist()]) == [0, 0, 1]

    _write_tu_dataset(tmp_path / "BARE" / "raw", "BARE", node_labels=False)
    bare = load_tu_dataset("BARE", root=tmp_path)
    assert bare[0].x.shape == (3, 1)  # constant features added for graphs without any


def test_normalized_mse():
    target = torch.tensor([[1.0], [2.0], [3.0], [6.0]])
    assert normalized_mse(target.mean().expand(4, 1), target) == pytest.approx(1.0)
    assert normalized_mse(target, target) == 0.0


# --- training ------------------------------------------------------------------------------


def _train_counting(name: str, train, test, **kwargs) -> float:
    torch.manual_seed(0)
    model = zoo.load(name, pretrained=False, head="graph_regression", hidden_channels=32, num_layers=3, **kwargs)
    model.train()
    mean, std = train.y.mean(), train.y.std()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    loader = DataLoader(train, batch_size=32, shuffle=True, generator=torch.Generator().manual_seed(0))
    epochs = 12
    scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, epochs * len(loader))
    for _ in range(epochs):
        for batch in loader:
            loss = torch.nn.functional.mse_loss(model(batch), (batch.y - mean) / std)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            scheduler.step()
    model.eval()
    with torch.no_grad():
        batch = Batch.from_data_list(list(test))
        return normalized_mse(model(batch) * std + mean, batch.y)


def test_triangle_readout_counts_triangles_far_better_than_sum():
    torch.set_num_threads(1)
    start = time.perf_counter()
    train = TriangleCounting("er", "train", num_graphs=2000, seed=0, pre_transform=AddTriangles())
    test = TriangleCounting("er", "test", num_graphs=2000, seed=0, pre_transform=AddTriangles())
    sum_error = _train_counting("gin_sum", train, test)
    triangle_error = _train_counting("gin3", train, test, moment=False, rank=16)
    print(
        f"normalised test MSE: gin_sum {sum_error:.3g}, gin3 triangle {triangle_error:.3g} "
        f"({time.perf_counter() - start:.0f} s)"
    )
    assert sum_error > 0.03  # 1-WL message passing cannot count triangles
    assert triangle_error < 0.2 * sum_error and triangle_error < 0.02


# --- model contract, heads, errors ---------------------------------------------------------


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("head", HEADS)
def test_heads_and_contract(name, head):
    torch.manual_seed(0)
    batch = _batch(channels=3)
    model = zoo.load(name, pretrained=False, head=head, in_channels=3, num_classes=5, hidden_channels=16, num_layers=2)
    assert set(NAMES) <= set(zoo.list_models("gin*")) and zoo.store.weight_entries.supported_heads(name) == HEADS
    assert model.num_classes == 5 and model.pretrained_cfg["head"] == head and not model.training
    rows = batch.num_nodes if head == "node_classification" else batch.num_graphs
    features = model.forward_features(batch)
    assert features.shape == (rows, model.num_features)
    assert model(batch).shape == (rows, 5)
    torch.testing.assert_close(model.forward_head(features), model(batch))
    assert model.forward_head(features, pre_logits=True) is features
    assert model.get_classifier() is model.fc and model.fc.in_features == model.num_features
    model.reset_classifier(0)
    assert model.num_classes == 0 and isinstance(model.get_classifier(), torch.nn.Identity)
    torch.testing.assert_close(model(batch), features)
    model.reset_classifier(2)
    assert model(batch).shape == (rows, 2)
    # A single graph without a batch vector.
    single = batch.get_example(0)
    del single.batch
    assert model(single).shape == ((single.num_nodes if head == "node_classification" else 1), 2)


def test_default_sizes_readout_options_and_edge_features():
    assert zoo.load("gin_sum", pretrained=False, head="graph_regression").num_classes == 1
    assert zoo.load("gin_sum", pretrained=False).num_classes == 2
    # 4 layers of 64 channels, jumping knowledge: 256 node channels.
    assert zoo.load("gin_sum", pretrained=False).num_features == 256
    assert zoo.load("gin_sopool", pretrained=False, out_channels=8).num_features == 64
    # gin3: the sum, then the moment (rank 32) and triangle (32 channels) parts on top of it
    assert zoo.load("gin3", pretrained=False).num_features == 3 * 96 + 32 + 32  # 3 layers of 96 by default
    assert zoo.load("gin3", pretrained=False, triangle=False, first_order=False, rank=16).num_features == 16
    assert zoo.load("gin3", pretrained=False, triangle_channels=8).num_features == 288 + 32 + 8

    batch = _batch(channels=3)
    batch.edge_attr = torch.randn(batch.num_edges, 2)
    model = zoo.load("gin3", pretrained=False, in_channels=3, edge_dim=2, num_classes=4)
    assert type(model.convs[0]).__name__ == "GINEConv"
    out = model(batch)
    batch.edge_attr = batch.edge_attr + 1
    assert out.shape == (4, 4) and not torch.allclose(model(batch), out)


def test_gin3_extends_the_sum_and_starts_as_gin_sum():
    """gin3's default readout is gin_sum's sum with the third-order parts on top, gated shut at
    the start: the untrained model's output ignores the moment and triangle parts, its features
    begin with gin_sum's, and the gates receive gradients (so training opens them)."""
    torch.manual_seed(0)
    batch = _batch(channels=3)
    gin3 = zoo.load("gin3", pretrained=False, in_channels=3, head="graph_regression", hidden_channels=8, num_layers=2)
    gin_sum = zoo.load(
        "gin_sum", pretrained=False, in_channels=3, head="graph_regression", hidden_channels=8, num_layers=2
    )
    shared = {k: v for k, v in gin3.state_dict().items() if k.startswith(("convs.", "norms."))}
    gin_sum.load_state_dict(shared, strict=False)
    assert gin3.pool.first_order and not gin3.pool.l2 and gin3.num_features == 16 + 32 + 32
    with torch.no_grad():
        before = gin3(batch)
        torch.testing.assert_close(gin3.forward_features(batch)[:, :16], gin_sum.forward_features(batch))
        gin3.pool.factors.weight.normal_()  # other moments, other triangles: the same output
        batch.triangle_index = batch.triangle_index[:, :0]
        torch.testing.assert_close(gin3(batch), before)
    gin3.train()(batch).sum().backward()
    assert gin3.norm.weight.grad[16:].abs().sum() > 0
    # with SOPool's part beside the sum, it starts as the two: only the third-order parts are gated
    both = zoo.load("gin3", pretrained=False, in_channels=3, hidden_channels=8, num_layers=2, bilinear=4)
    assert bool((both.norm.weight[: 16 + 16] == 1).all()) and bool((both.norm.weight[16 + 16 :] == 0).all())
    # SOPool's part alone: it starts as gin_sopool, the third-order parts gated
    sopool_first = zoo.load("gin3", pretrained=False, in_channels=3, hidden_channels=8, num_layers=2, bilinear=4,
                            first_order=False)  # fmt: skip
    assert bool((sopool_first.norm.weight[:16] == 1).all()) and bool((sopool_first.norm.weight[16:] == 0).all())
    # without the sum or SOPool's part there is nothing to start as: no gate
    parts_only = zoo.load("gin3", pretrained=False, first_order=False, l2=True, in_channels=3)
    assert bool((parts_only.norm.weight == 1).all())


def test_virtual_node_sees_the_whole_graph_and_saves_its_size(tmp_path):
    """virtual_node=True: a node's embedding after the second layer depends on nodes beyond its
    2-hop reach (through the graph's sum), the model stays permutation invariant and one graph
    alone gives its row of the batch; a saved model states the option, so it loads as it was."""
    torch.manual_seed(0)
    path = Data(x=torch.eye(6)[:, :3].contiguous(), edge_index=torch.tensor([[0, 1, 2, 3, 4], [1, 2, 3, 4, 5]]))
    path.edge_index = torch.cat([path.edge_index, path.edge_index.flip(0)], 1)
    options = dict(pretrained=False, in_channels=3, head="node_classification", hidden_channels=8, num_layers=2)
    for virtual, reaches in ((False, False), (True, True)):
        model = zoo.load("gin_sum", virtual_node=virtual, **options).eval()
        far = path.clone()
        far.x = far.x.clone()
        far.x[5] = torch.tensor([0.0, 0.0, 5.0])  # node 5 is 5 hops from node 0
        with torch.no_grad():
            moved = not torch.allclose(model(path)[0], model(far)[0])
        assert moved == reaches, virtual
    batch = _batch(channels=3)
    model = zoo.load("gin3", pretrained=False, in_channels=3, num_classes=3, virtual_node=True)
    model.train()(batch)
    model.eval()
    with torch.no_grad():
        torch.testing.assert_close(model(_permute(batch, 1)), model(batch), rtol=1e-4, atol=1e-5)
        first = batch.get_example(0)
        first.batch = None
        torch.testing.assert_close(model(first), model(batch)[:1], rtol=1e-4, atol=1e-5)
    assert model.size_kwargs == {"hidden_channels": 96, "num_layers": 3, "virtual_node": True}
    zoo.save(model, tmp_path / "vn")
    with torch.no_grad():
        torch.testing.assert_close(zoo.load(tmp_path / "vn")(batch), model(batch))


def test_weights_published_before_the_sum_keep_their_readout():
    for name in ("gin3.triangles_er", "gin3.fmnist"):
        model = zoo.load(name)
        assert not model.pool.first_order and model.pool.l2 and model.num_features == 64, name


def test_training_grad_checkpointing_save_and_load(tmp_path):
    torch.manual_seed(0)
    batch = _batch(channels=3)
    model = zoo.load("gin3", pretrained=False, in_channels=3, num_classes=3, hidden_channels=8, num_layers=2)
    model.train()
    reference = model.state_dict()
    torch.manual_seed(1)  # the same dropout mask in both passes (gin3's default drops 0.2 before its head)
    model(batch).sum().backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters()}
    model.load_state_dict(reference)
    model.zero_grad()
    model.set_grad_checkpointing()
    torch.manual_seed(1)
    model(batch).sum().backward()
    for name, param in model.named_parameters():
        torch.testing.assert_close(param.grad, grads[name], msg=name)
    model.eval()
    zoo.save(model, tmp_path / "gin3")
    restored = zoo.load(tmp_path / "gin3")
    with torch.no_grad():
        torch.testing.assert_close(restored(batch), model(batch))


def test_batch_renorm_is_batch_independent_and_standardises():
    torch.manual_seed(0)
    norm = BatchRenorm(2)
    first = torch.randn(64, 2) * 5 + 3
    torch.testing.assert_close(norm(first).mean(0), torch.zeros(2), atol=1e-5, rtol=0)  # first batch sets the stats
    torch.testing.assert_close(norm.running_mean, first.mean(0))
    x = torch.randn(8, 2, requires_grad=True)
    mean, std = norm.running_mean.clone(), (norm.running_var + norm.eps).sqrt()
    # In training, a row's output is the running-statistics standardisation, whatever its batch.
    for companions in (x[1:], 10 * x[1:] + 4):
        out = norm(torch.cat([x[:1], companions]))
        torch.testing.assert_close(out[0], (x[0] - mean) / std)
        mean, std = norm.running_mean.clone(), (norm.running_var + norm.eps).sqrt()
    out.sum().backward()
    assert x.grad is not None  # the gradient flows through the batch statistics
    norm.eval()
    torch.testing.assert_close(norm(x), (x - norm.running_mean) / (norm.running_var + norm.eps).sqrt())


def test_batch_renorm_cumulative_average_for_update_bn():
    """momentum=None is BatchNorm's cumulative average, so torch.optim.swa_utils.update_bn
    (which resets every BatchNorm and sets momentum None) recomputes a GIN's statistics."""
    torch.manual_seed(0)
    norm = BatchRenorm(2, momentum=None)
    batches = [torch.randn(16, 2) * 3 + i for i in range(4)]
    for x in batches:
        norm(x)
    torch.testing.assert_close(norm.running_mean, torch.stack([x.mean(0) for x in batches]).mean(0))
    torch.testing.assert_close(norm.running_var, torch.stack([x.var(0, unbiased=False) for x in batches]).mean(0))
    model = zoo.load("gin3", pretrained=False, in_channels=3)
    graphs = [_batch(channels=3) for _ in range(2)]
    torch.optim.swa_utils.update_bn(graphs, model)
    assert int(model.norm.num_batches_tracked) == 2 and model.norm.momentum == 0.1  # update_bn restores momentum


def test_bad_inputs_raise_clear_errors():
    batch = _batch(channels=3)
    model = zoo.load("gin3", pretrained=False, in_channels=3)
    without = batch.clone()
    del without.triangle_index
    with pytest.raises(ValueError, match="AddTriangles"):
        model(without)
    with pytest.raises(ValueError, match=r"x \[num_nodes, 3\].*in_channels=2"):
        zoo.load("gin_sum", pretrained=False, in_channels=3)(
            Data(x=torch.ones(4, 2), edge_index=torch.empty(2, 0, dtype=torch.long))
        )
    with pytest.raises(ValueError, match="Constant"):
        model(Data(edge_index=torch.tensor([[0], [1]]), num_nodes=2))
    with pytest.raises(TypeError, match="Data/Batch"):
        model(torch.ones(4, 3))
    with pytest.raises(ValueError, match="edge_attr must be"):
        zoo.load("gin_sum", pretrained=False, in_channels=3, edge_dim=2)(batch)
    with pytest.raises(ValueError, match="no head"):
        zoo.load("gin3", pretrained=False, head="classification")
    with pytest.raises(ValueError, match="takes no options"):
        zoo.load("gin_sum", pretrained=False, rank=3)
    with pytest.raises(ValueError, match="at least one part"):
        ThirdOrderPooling(4, moment=False)
    pool = ThirdOrderPooling(3, 4, triangle=True)
    with pytest.raises(ValueError, match="needs triangle_index.*AddTriangles"):
        pool(batch.x, batch.batch)
    with pytest.raises(ValueError, match=r"\[3, T\] int64"):
        pool(batch.x, batch.batch, triangle_index=batch.triangle_index[:2])
    with pytest.raises(ValueError, match="refers to node"):
        pool(batch.x[:5], batch.batch[:5], triangle_index=batch.triangle_index)
    with pytest.raises(ValueError, match="edge_index"):
        AddTriangles()(Data(num_nodes=3))
