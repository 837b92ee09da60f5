"""Deep belief nets and RBMs as scikit-learn estimators: `DBNClassifier` (greedy pretraining,
then fine-tuning, behind ``fit``/``transform``/``predict``) and `BernoulliRBM`, scikit-learn's
RBM estimator (its training rule and random numbers) on a zoo `RBM`."""

from __future__ import annotations

import math
import time
import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np
import scipy.sparse as sp
import torch
from sklearn.base import BaseEstimator, ClassifierMixin, ClassNamePrefixFeaturesOutMixin, TransformerMixin
from sklearn.exceptions import ConvergenceWarning, NotFittedError
from sklearn.neural_network import BernoulliRBM as SklearnBernoulliRBM
from sklearn.utils import Tags, check_random_state, gen_even_slices
from sklearn.utils.extmath import softmax
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import check_is_fitted, validate_data

from zoo.architectures.dbn import DBN, RBM
from zoo.errors import ZooError
from zoo.training.belief_nets.backprop import BackpropConfig, finetune_dbn
from zoo.training.belief_nets.contrastive import ArrayLike, RBMConfig, batched, pretrain

MIN_UPDATES = 600  # updates each RBM and the fine-tuning get at least, with the default epochs
MIN_FEATURE_SPREAD = 0.02  # mean std of the top features across rows below which they are dead
MONITOR_ROWS = 1000  # rows the collapse check looks at


class FittedWithoutLabelsError(ZooError, NotFittedError):
    """A `DBNClassifier` fitted without labels (``fit(X)``) asked to classify: a `ZooError`, and
    scikit-learn's NotFittedError (so a ValueError and an AttributeError) as its tools expect."""


class DBNClassifier(ClassifierMixin, TransformerMixin, BaseEstimator):
    """A deep belief net as a scikit-learn estimator: ``fit(X, y)`` pretrains the RBM stack
    greedily on X and fine-tunes it on y; ``fit(X)`` only pretrains, for ``transform``.
    ``transform`` gives the top hidden layer's probabilities, ``predict`` / ``predict_proba`` /
    ``score`` classify. Input checks, labels and cloning are scikit-learn's own (it passes
    ``check_estimator``); the fitted zoo model is ``model_``.

    ``hidden_layer_sizes`` follows MLPClassifier: the hidden layers only, the input size comes
    from X. ``random_state`` seeds weight init, sampling, shuffling and dropout without touching
    torch's global random state. Computation is float32.

    The defaults fit the data's size: ``batch_size=None`` is a tenth of the rows (10 to 64), and
    ``pretrain_epochs=None`` / ``finetune_epochs=None`` are 10 / 30 epochs, or more on small data
    so that each RBM and the fine-tuning get at least `MIN_UPDATES` updates (a few hundred rows
    would otherwise leave the features dead and the net predicting one class). A fit whose top
    features barely vary across the rows, or that predicts one class for its own training rows,
    warns (``ConvergenceWarning``); so does data outside [0, 1] for Bernoulli visible units.
    """

    def __init__(
        self,
        hidden_layer_sizes: Sequence[int] = (500, 500),
        *,
        visible: str = "bernoulli",
        pretrain_epochs: int | None = None,
        learning_rate: float | None = None,
        k: int = 1,
        persistent: bool = False,
        batch_size: int | None = None,
        weight_cost: float = 2e-4,
        sparsity_target: float | None = None,
        finetune_epochs: int | None = None,
        finetune_learning_rate: float = 0.3,
        weight_decay: float = 1e-4,
        drop_rate: float = 0.0,
        device: str | torch.device = "cpu",
        random_state: int | None = None,
        verbose: bool = False,
    ) -> None:
        self.hidden_layer_sizes = hidden_layer_sizes
        self.visible = visible
        self.pretrain_epochs = pretrain_epochs
        self.learning_rate = learning_rate
        self.k = k
        self.persistent = persistent
        self.batch_size = batch_size
        self.weight_cost = weight_cost
        self.sparsity_target = sparsity_target
        self.finetune_epochs = finetune_epochs
        self.finetune_learning_rate = finetune_learning_rate
        self.weight_decay = weight_decay
        self.drop_rate = drop_rate
        self.device = device
        self.random_state = random_state
        self.verbose = verbose

    def __sklearn_tags__(self) -> Tags:
        tags = super().__sklearn_tags__()
        tags.target_tags.required = False  # fit(X) pretrains only, for transform
        tags.transformer_tags.preserves_dtype = ["float32"]
        return tags

    def fit(self, X: ArrayLike, y: ArrayLike | None = None) -> DBNClassifier:
        if y is None:
            X = validate_data(self, X, dtype=np.float32)
            self.__dict__.pop("classes_", None)  # from an earlier supervised fit
        else:
            X, y = validate_data(self, X, y, dtype=np.float32)
            check_classification_targets(y)
            self.classes_, y = np.unique(y, return_inverse=True)
        sizes = (self.n_features_in_, *self.hidden_layer_sizes)
        batch_size, pretrain_epochs, finetune_epochs = self._budget(X.shape[0])
        if self.visible == "bernoulli" and X.size and (X.min() < 0 or X.max() > 1):
            warnings.warn(
                f"X holds values from {X.min():g} to {X.max():g}, and Bernoulli visible units read probabilities "
                "in [0, 1]: scale X first (e.g. MinMaxScaler), or pass visible='gaussian' for standardized data",
                UserWarning,
                stacklevel=2,
            )
        rbm_config = RBMConfig(
            epochs=pretrain_epochs,
            batch_size=batch_size,
            learning_rate=self.learning_rate,
            k=self.k,
            persistent=self.persistent,
            weight_cost=self.weight_cost,
            sparsity_target=self.sparsity_target,
        )
        finetune_config = BackpropConfig(
            epochs=finetune_epochs,
            batch_size=batch_size,
            learning_rate=self.finetune_learning_rate,
            weight_decay=self.weight_decay,
        )
        device = torch.device(self.device)
        X = torch.from_numpy(X).to(device)
        num_classes = 0 if y is None else len(self.classes_)
        with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
            generator = torch.Generator(device)
            if self.random_state is not None:
                torch.manual_seed(self.random_state)
                generator.manual_seed(self.random_state)
            else:
                generator.seed()
            self.model_ = DBN(sizes, num_classes, visible=self.visible, drop_rate=self.drop_rate).to(device)
            self.pretrain_history_ = pretrain(self.model_, X, rbm_config, generator=generator, progress=self.verbose)
            self.finetune_history_ = []
            if y is not None and finetune_epochs > 0:
                targets = torch.from_numpy(y).to(device)
                self.finetune_history_ = finetune_dbn(
                    self.model_, X, targets, finetune_config, generator=generator, progress=self.verbose
                )
        self._warn_if_collapsed(X[:MONITOR_ROWS], y[:MONITOR_ROWS] if self.finetune_history_ else None)
        return self

    def _budget(self, rows: int) -> tuple[int, int, int]:
        """The batch size and the pretraining and fine-tuning epochs for ``rows`` rows: the
        parameters', or the defaults scaled to the data (see the class docstring)."""
        batch_size = self.batch_size or min(64, max(10, rows // 10))
        per_epoch = max(math.ceil(rows / batch_size), 1)
        least = math.ceil(MIN_UPDATES / per_epoch)
        pretrain_epochs = self.pretrain_epochs if self.pretrain_epochs is not None else max(10, least)
        finetune_epochs = self.finetune_epochs if self.finetune_epochs is not None else max(30, least)
        return batch_size, pretrain_epochs, finetune_epochs

    def _warn_if_collapsed(self, X: torch.Tensor, y: np.ndarray | None) -> None:
        """A ConvergenceWarning when the top features barely vary across ``X`` (dead units: the
        net cannot tell the rows apart) or the fine-tuned net gives them all one class."""
        if X.shape[0] < 2:
            return
        with torch.no_grad():
            spread = float(batched(self.model_.forward_features, X).std(0).mean())
            predicted = batched(self.model_, X).argmax(1).cpu().numpy() if y is not None else None
        if spread < MIN_FEATURE_SPREAD:
            warnings.warn(
                f"the DBN's top features barely vary across the training rows (mean std {spread:.2g}): it learned "
                "no useful features; train longer (pretrain_epochs, finetune_epochs), use smaller batches, or check "
                "that X is scaled to [0, 1]",
                ConvergenceWarning,
                stacklevel=3,
            )
        if predicted is not None and len(np.unique(y)) > 1:
            if len(np.unique(predicted)) == 1:
                warnings.warn(
                    f"the fine-tuned DBN predicts one class ({self.classes_[predicted[0]]}) for all its training "
                    "rows: it did not learn; train longer (finetune_epochs) or lower finetune_learning_rate",
                    ConvergenceWarning,
                    stacklevel=3,
                )

    @torch.no_grad()
    def _forward(self, X: ArrayLike, features: bool) -> np.ndarray:
        check_is_fitted(self, "model_")
        X = validate_data(self, X, dtype=np.float32, reset=False)
        fn = self.model_.forward_features if features else self.model_
        return batched(fn, torch.from_numpy(X).to(self.model_.rbms[0].weight.device)).cpu().numpy()

    def transform(self, X: ArrayLike) -> np.ndarray:
        """The top hidden layer's probabilities, (n_samples, hidden_layer_sizes[-1])."""
        return self._forward(X, features=True)

    def predict_proba(self, X: ArrayLike) -> np.ndarray:
        check_is_fitted(self, "model_")
        if not hasattr(self, "classes_"):
            raise FittedWithoutLabelsError(
                "this DBNClassifier was fitted without labels (fit(X)); call fit(X, y) to classify"
            )
        return softmax(self._forward(X, features=False))

    def predict(self, X: ArrayLike) -> np.ndarray:
        proba = self.predict_proba(X)
        return self.classes_[proba.argmax(1)]


def _rows(X: Any) -> torch.Tensor:
    """A validated array as a tensor sharing its memory (copied if read-only: torch needs
    writable); a scipy sparse matrix made dense."""
    if sp.issparse(X):
        return torch.from_numpy(X.toarray())
    return torch.from_numpy(X if X.flags.writeable else X.copy())


def _bernoulli_draw(p: torch.Tensor, rng: np.random.RandomState) -> torch.Tensor:
    """``uniform < p`` with the uniforms from ``rng``, in scikit-learn's order and precision."""
    return torch.from_numpy(rng.uniform(size=tuple(p.shape))) < p


class BernoulliRBM(ClassNamePrefixFeaturesOutMixin, TransformerMixin, BaseEstimator):
    """``sklearn.neural_network.BernoulliRBM`` on a zoo `RBM`: the same parameters, attributes
    (``components_``, ``intercept_hidden_``, ``intercept_visible_``, ``h_samples_``,
    ``n_features_in_``), methods and training rule, and the same random numbers drawn in the same
    order from ``random_state``, so that a fit, a ``partial_fit``, ``gibbs`` and ``score_samples``
    give scikit-learn's results to rounding. A drop-in replacement whose fitted model is ``rbm_``,
    an `RBM` module for torch code, a `DBN` layer or ``zoo.save``.

    The rule is scikit-learn's persistent CD-1 (stochastic maximum likelihood) with plain SGD: no
    momentum, weight cost or visible-bias init (for those, `train_rbm`'s Practical Guide recipe).
    Like scikit-learn, each step divides both phases' statistics by the data rows, although the
    chain has ``batch_size`` particles; ``partial_fit(X)`` is one step on all of X.

    Methods take arrays or CPU tensors and return NumPy arrays, as scikit-learn's do:
    ``transform`` and ``score_samples`` in the fitted precision (float64, or float32 after
    ``fit`` on float32 data), ``gibbs`` booleans. The attributes are NumPy views of ``rbm_``'s
    parameters: writing into them changes the module. scipy sparse matrices are accepted where
    scikit-learn accepts them (each mini-batch, or the rows transformed, made dense on the way).
    """

    _parameter_constraints: dict = dict(SklearnBernoulliRBM._parameter_constraints)

    def __init__(
        self,
        n_components: int = 256,
        *,
        learning_rate: float = 0.1,
        batch_size: int = 10,
        n_iter: int = 10,
        verbose: int = 0,
        random_state: int | np.random.RandomState | None = None,
    ) -> None:
        self.n_components = n_components
        self.learning_rate = learning_rate
        self.batch_size = batch_size
        self.n_iter = n_iter
        self.verbose = verbose
        self.random_state = random_state

    @property
    def components_(self) -> np.ndarray:
        """The weights, (n_components, n_features)."""
        return self.rbm_.weight.detach().numpy()

    @property
    def intercept_hidden_(self) -> np.ndarray:
        return self.rbm_.hidden_bias.detach().numpy()

    @property
    def intercept_visible_(self) -> np.ndarray:
        return self.rbm_.visible_bias.detach().numpy()

    @property
    def _n_features_out(self) -> int:
        return self.rbm_.num_hidden

    def __sklearn_tags__(self) -> Tags:
        tags = super().__sklearn_tags__()
        tags.transformer_tags.preserves_dtype = ["float64", "float32"]
        tags.input_tags.sparse = True  # as scikit-learn's BernoulliRBM
        return tags

    def _start(self, rng: np.random.RandomState, num_visible: int, dtype: np.dtype) -> None:
        """scikit-learn's initial state: weights N(0, 0.01) drawn from ``rng``, zero biases and chain."""
        weight = torch.from_numpy(np.asarray(rng.normal(0, 0.01, (self.n_components, num_visible)), dtype=dtype))
        with torch.device("meta"):  # no draw from torch's global generator for an init replaced at once
            rbm = RBM(num_visible, self.n_components)
        self.rbm_ = rbm.to_empty(device="cpu").to(weight.dtype)
        with torch.no_grad():
            self.rbm_.weight.copy_(weight)
            self.rbm_.hidden_bias.zero_()
            self.rbm_.visible_bias.zero_()
        self.h_samples_ = np.zeros((self.batch_size, self.n_components), dtype=dtype)

    @torch.no_grad()
    def _step(self, v_pos: torch.Tensor, rng: np.random.RandomState) -> None:
        """One update on the mini-batch ``v_pos``: scikit-learn's ``BernoulliRBM._fit``."""
        rbm = self.rbm_
        v_pos = v_pos.to(rbm.weight.dtype)
        h_pos = rbm.transform(v_pos)
        v_neg = _bernoulli_draw(rbm.visible_mean(torch.from_numpy(self.h_samples_)), rng).to(v_pos.dtype)
        h_neg = rbm.transform(v_neg)
        lr = float(self.learning_rate) / v_pos.shape[0]
        rbm.weight.addmm_(h_pos.t(), v_pos, alpha=lr).addmm_(h_neg.t(), v_neg, alpha=-lr)
        rbm.hidden_bias.add_(h_pos.sum(0) - h_neg.sum(0), alpha=lr)
        rbm.visible_bias.add_(v_pos.sum(0) - v_neg.sum(0), alpha=lr)
        self.h_samples_ = _bernoulli_draw(h_neg, rng).to(h_neg.dtype).numpy()

    def fit(self, X: ArrayLike, y: None = None) -> BernoulliRBM:
        """Train from scratch: ``n_iter`` sweeps over X in order, in ``batch_size`` mini-batches;
        ``verbose`` prints each sweep's pseudo-likelihood as scikit-learn does."""
        self._validate_params()
        X = validate_data(self, X, accept_sparse="csr", dtype=(np.float64, np.float32), order="C")
        rng = check_random_state(self.random_state)
        self._start(rng, X.shape[1], X.dtype)
        data = X if sp.issparse(X) else _rows(X)
        num_batches = math.ceil(X.shape[0] / self.batch_size)
        batches = list(gen_even_slices(num_batches * self.batch_size, num_batches, n_samples=X.shape[0]))
        begin = time.time()
        for iteration in range(1, self.n_iter + 1):
            for batch in batches:
                self._step(_rows(data[batch]) if sp.issparse(data) else data[batch], rng)
            if self.verbose:
                end = time.time()
                print(
                    f"[{type(self).__name__}] Iteration {iteration}, pseudo-likelihood = "
                    f"{self.score_samples(X).mean():.2f}, time = {end - begin:.2f}s"
                )
                begin = end
        return self

    def partial_fit(self, X: ArrayLike, y: None = None) -> BernoulliRBM:
        """One update on all of X (float64), starting the model and its persistent chain on the
        first call; the random numbers come from ``random_state_``, made once from ``random_state``."""
        self._validate_params()
        first_pass = not hasattr(self, "rbm_")
        X = validate_data(self, X, accept_sparse="csr", dtype=np.float64, reset=first_pass, order="C")
        if not hasattr(self, "random_state_"):
            self.random_state_ = check_random_state(self.random_state)
        if first_pass:
            self._start(self.random_state_, X.shape[1], X.dtype)
        self._step(_rows(X), self.random_state_)
        return self

    def _visible(self, X: ArrayLike, dtype: Any = (np.float64, np.float32)) -> torch.Tensor:
        check_is_fitted(self)
        X = validate_data(self, X, accept_sparse="csr", dtype=dtype, reset=False, order="C")
        return _rows(X).to(self.rbm_.weight.dtype)

    @torch.no_grad()
    def transform(self, X: ArrayLike) -> np.ndarray:
        """P(h=1 | v=X), (n_samples, n_components)."""
        v = self._visible(X)
        return self.rbm_.transform(v).numpy()

    @torch.no_grad()
    def gibbs(self, v: ArrayLike) -> np.ndarray:
        """One Gibbs step v -> h -> v per row, every state sampled; booleans, as scikit-learn's."""
        v = self._visible(v)
        if not hasattr(self, "random_state_"):
            self.random_state_ = check_random_state(self.random_state)
        h = _bernoulli_draw(self.rbm_.transform(v), self.random_state_).to(v.dtype)
        return _bernoulli_draw(self.rbm_.visible_mean(h), self.random_state_).numpy()

    def score_samples(self, X: ArrayLike) -> np.ndarray:
        """scikit-learn's stochastic log pseudo-likelihood per row: n_features * log P(v_i | v_-i)
        for one unit i per row, drawn afresh from ``random_state`` on every call."""
        v = self._visible(X, dtype="numeric")
        rng = check_random_state(self.random_state)
        index = torch.from_numpy(rng.randint(0, v.shape[1], v.shape[0]))
        return self.rbm_.pseudo_likelihood(v, index).numpy()
