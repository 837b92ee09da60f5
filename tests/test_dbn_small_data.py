"""DBNClassifier on the data sizes scikit-learn users bring: its default epochs and batch size
scale with the rows, so a few hundred of scikit-learn's real digits learn (as LogisticRegression
does) instead of collapsing to one class, and a fit whose features die says so
(ConvergenceWarning). BernoulliRBM takes scipy sparse matrices as scikit-learn's does."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.datasets import load_digits
from sklearn.exceptions import ConvergenceWarning
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import cross_val_score
from sklearn.neural_network import BernoulliRBM as SklearnBernoulliRBM

from zoo.training.belief_nets import BernoulliRBM, DBNClassifier

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def digits() -> tuple[np.ndarray, np.ndarray]:
    X, y = load_digits(return_X_y=True)
    return X / 16.0, y  # pixels 0..16 as the probabilities Bernoulli units read


@pytest.mark.parametrize("rows", [100, 300])
def test_small_data_learns_as_logistic_regression_does(digits, rows) -> None:
    X, y = digits
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConvergenceWarning)  # no collapse to warn about
        dbn = DBNClassifier(random_state=0).fit(X[:rows], y[:rows])
    logistic = LogisticRegression(max_iter=2000).fit(X[:rows], y[:rows])
    held_out = slice(1400, None)
    assert dbn.score(X[:rows], y[:rows]) > 0.9  # was 0.12-0.59: one class, or nearly
    assert dbn.score(X[held_out], y[held_out]) > logistic.score(X[held_out], y[held_out]) - 0.05
    assert dbn.transform(X[:rows]).std(0).mean() > 0.05  # the features vary across the rows


def test_cross_validation_on_400_rows(digits) -> None:
    X, y = digits
    scores = cross_val_score(DBNClassifier(random_state=0), X[:400], y[:400], cv=2)
    assert scores.min() > 0.8  # was [0.17, 0.19]


def test_a_fit_whose_features_die_warns(digits) -> None:
    X, y = digits
    with pytest.warns(ConvergenceWarning, match="top features barely vary"):
        DBNClassifier(pretrain_epochs=1, finetune_epochs=1, batch_size=64, random_state=0).fit(X[:100], y[:100])
    with pytest.warns(UserWarning, match=r"X holds values from 0 to 16, and Bernoulli visible units read"):
        DBNClassifier(hidden_layer_sizes=(16,), pretrain_epochs=1, finetune_epochs=1).fit(X[:60] * 16, y[:60])


def test_the_budget_follows_the_rows() -> None:
    assert DBNClassifier()._budget(100) == (10, 60, 60)
    assert DBNClassifier()._budget(60_000) == (64, 10, 30)  # large data: the usual epochs
    assert DBNClassifier(batch_size=32, pretrain_epochs=2, finetune_epochs=3)._budget(100) == (32, 2, 3)


def test_bernoulli_rbm_takes_sparse_input_as_sklearn_does(digits) -> None:
    X = (digits[0][:300] > 0.5).astype(np.float64)
    sparse = sp.csr_matrix(X)
    options = dict(n_components=16, learning_rate=0.05, batch_size=10, n_iter=2, random_state=0)
    ours, theirs = BernoulliRBM(**options).fit(sparse), SklearnBernoulliRBM(**options).fit(sparse)
    np.testing.assert_allclose(ours.components_, theirs.components_, rtol=0, atol=1e-10)
    np.testing.assert_allclose(ours.transform(sparse), theirs.transform(sparse), rtol=0, atol=1e-12)
    np.testing.assert_allclose(ours.score_samples(sparse), theirs.score_samples(sparse), rtol=0, atol=1e-9)
    np.testing.assert_allclose(ours.components_, BernoulliRBM(**options).fit(X).components_, rtol=0, atol=1e-12)
    ours.partial_fit(sp.csc_matrix(X[:20]))
    theirs.partial_fit(sp.csc_matrix(X[:20]))
    np.testing.assert_allclose(ours.components_, theirs.components_, rtol=0, atol=1e-10)
    assert ours.__sklearn_tags__().input_tags.sparse
