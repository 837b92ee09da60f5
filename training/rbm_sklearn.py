"""Deep belief nets and RBMs as scikit-learn estimators: `DBNClassifier` (greedy pretraining,
then fine-tuning, behind ``fit``/``transform``/``predict``) and `BernoulliRBM`, scikit-learn's
RBM estimator (its training rule and random numbers) on a zoo `RBM`."""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from sklearn.base import BaseEstimator, ClassifierMixin, ClassNamePrefixFeaturesOutMixin, TransformerMixin
from sklearn.exceptions import NotFittedError
from sklearn.neural_network import BernoulliRBM as SklearnBernoulliRBM
from sklearn.utils import Tags, check_random_state, gen_even_slices
from sklearn.utils.extmath import softmax
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import check_is_fitted, validate_data

from zoo.architectures.dbn import DBN, RBM
from zoo.training.dbn_finetune import FinetuneConfig, finetune_dbn
from zoo.training.rbm_train import ArrayLike, RBMConfig, batched, pretrain


class DBNClassifier(ClassifierMixin, TransformerMixin, BaseEstimator):
    """A deep belief net as a scikit-learn estimator: ``fit(X, y)`` pretrains the RBM stack
    greedily on X and fine-tunes it on y; ``fit(X)`` only pretrains, for ``transform``.
    ``transform`` gives the top hidden layer's probabilities, ``predict`` / ``predict_proba`` /
    ``score`` classify. Input checks, labels and cloning are scikit-learn's own (it passes
    ``check_estimator``); the fitted zoo model is ``model_``.

    ``hidden_layer_sizes`` follows MLPClassifier: the hidden layers only, the input size comes
    from X. ``random_state`` seeds weight init, sampling, shuffling and dropout without touching
    torch's global random state. Computation is float32.
    """

    def __init__(
        self,
        hidden_layer_sizes: Sequence[int] = (500, 500),
        *,
        visible: str = "bernoulli",
        pretrain_epochs: int = 10,
        learning_rate: float | None = None,
        k: int = 1,
        persistent: bool = False,
        batch_size: int = 64,
        weight_cost: float = 2e-4,
        sparsity_target: float | None = None,
        finetune_epochs: int = 30,
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
        rbm_config = RBMConfig(
            epochs=self.pretrain_epochs,
            batch_size=self.batch_size,
            learning_rate=self.learning_rate,
            k=self.k,
            persistent=self.persistent,
            weight_cost=self.weight_cost,
            sparsity_target=self.sparsity_target,
        )
        finetune_config = FinetuneConfig(
            epochs=self.finetune_epochs,
            batch_size=self.batch_size,
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
            if y is not None and self.finetune_epochs > 0:
                targets = torch.from_numpy(y).to(device)
                self.finetune_history_ = finetune_dbn(
                    self.model_, X, targets, finetune_config, generator=generator, progress=self.verbose
                )
        return self

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
            raise NotFittedError("this DBNClassifier was fitted without labels (fit(X)); call fit(X, y) to classify")
        return softmax(self._forward(X, features=False))

    def predict(self, X: ArrayLike) -> np.ndarray:
        proba = self.predict_proba(X)
        return self.classes_[proba.argmax(1)]


def _rows(X: np.ndarray) -> torch.Tensor:
    """A validated array as a tensor sharing its memory (copied if read-only: torch needs writable)."""
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
    parameters: writing into them changes the module. Sparse input is not accepted.
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
        X = validate_data(self, X, dtype=(np.float64, np.float32), order="C")
        rng = check_random_state(self.random_state)
        self._start(rng, X.shape[1], X.dtype)
        data = _rows(X)
        num_batches = math.ceil(X.shape[0] / self.batch_size)
        batches = list(gen_even_slices(num_batches * self.batch_size, num_batches, n_samples=X.shape[0]))
        begin = time.time()
        for iteration in range(1, self.n_iter + 1):
            for batch in batches:
                self._step(data[batch], rng)
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
        X = validate_data(self, X, dtype=np.float64, reset=first_pass, order="C")
        if not hasattr(self, "random_state_"):
            self.random_state_ = check_random_state(self.random_state)
        if first_pass:
            self._start(self.random_state_, X.shape[1], X.dtype)
        self._step(_rows(X), self.random_state_)
        return self

    def _visible(self, X: ArrayLike, dtype: Any = (np.float64, np.float32)) -> torch.Tensor:
        check_is_fitted(self)
        X = validate_data(self, X, dtype=dtype, reset=False, order="C")
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
