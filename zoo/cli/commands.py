"""The commands that load models: ``zoo predict``, ``generate``, ``finetune``, ``tune``, ``eval``,
``demo`` (`zoo.cli.parser.COMMANDS` names each one's options and handler; ``bench``, ``export`` and
``shards`` have modules of their own)."""

from __future__ import annotations

import argparse
import sys
import warnings
from pathlib import Path

import torch
from tqdm import tqdm

import zoo
from zoo.cli.predict_files import answer_lines, strict_json
from zoo.devices import resolve_device
from zoo.errors import InvalidArgumentError, ZooError
from zoo.inference import Predictor
from zoo.inference.items import IMAGE_SUFFIXES
from zoo.loading.images import open_image
from zoo.store import weight_entries
from zoo.store.download import weight_folders
from zoo.store.files import check_output, write_bytes_atomic
from zoo.tokenizer import check_byte_lm, complete


def run_predict(args: argparse.Namespace) -> int:
    for option in ("input", "format", "out"):  # a Namespace made in Python may leave them out
        setattr(args, option, getattr(args, option, None))
    _check_predict_inputs(args)
    if args.input is not None:
        from zoo.cli.predict_files import predict_file

        return predict_file(args)
    molecules, text_head = _what_it_reads(args.name)
    if molecules:  # a model fine-tuned on molecules: the arguments are SMILES
        from zoo.cli.predict_smiles import predict_smiles

        return predict_smiles(args)
    head = None if any(Path(path).exists() for path in args.images) else text_head
    if head == "lm":
        raise InvalidArgumentError(f"{args.name} is a language model: continue a text with zoo generate NAME 'PROMPT'")
    if head is not None:
        raise InvalidArgumentError(
            f"{args.name} reads text, and zoo predict takes texts from a file, one per row: "
            'zoo predict NAME --input rows.csv (a text column) or rows.jsonl ({"text": ...} per line)'
        )
    for path in args.images:  # a missing, unreadable or truncated file is found before the model loads
        open_image(path, decode=False)
    predictor = Predictor(
        args.name, device=args.device, batch_size=args.batch_size, num_workers=getattr(args, "num_workers", 0)
    )
    model = predictor.model
    progress = tqdm(
        total=len(args.images), desc="zoo predict", unit="img", leave=False,
        disable=args.no_progress or len(args.images) <= args.batch_size,
    )  # fmt: skip
    try:
        for start, batch in zip(range(0, len(args.images), args.batch_size), predictor.batches(args.images)):
            paths, batch = args.images[start : start + args.batch_size], batch.to(args.device)
            if args.optimize and start == 0:
                progress.write(
                    f"zoo: optimizing {args.name} ({args.optimize}) on the first {len(paths)} images; "
                    "compiling takes a while",
                    file=sys.stderr,
                )
                # timed on this batch's size; a last, smaller batch is padded onto its graph
                model = zoo.optimize(model, batch, args.optimize, max_batch_graphs=1)
                progress.write(f"zoo: {str(model.optimize_report).splitlines()[0]}", file=sys.stderr)
            with torch.no_grad():  # not inference_mode: an optimized model's compiled graph expects no_grad
                answers = predictor.meaning.answers(model(batch), args.top_k)
            lines = [line for path, answer in zip(paths, answers) for line in answer_lines(path, answer)]
            progress.write("\n".join(lines), file=sys.stdout)
            progress.update(len(paths))
    finally:
        progress.close()  # clears the bar, also before an error message
    return 0


def _what_it_reads(name: str) -> tuple[bool, str | None]:
    """Whether NAME (resolved once: registered weights, torchvision's name of them, or a saved
    folder) reads molecules, and its head when it reads text, from its entry or config.json alone;
    (False, None) where that is not known before loading (a Hub repository; loading says what is wrong)."""
    from zoo.loading.resolve import Registered, SavedFolder, resolve
    from zoo.loading.saved import read_saved_config
    from zoo.loading.smiles import INPUT_FORMAT

    try:
        with warnings.catch_warnings():  # a folder shadowed by a registry name: zoo.load says so, once
            warnings.simplefilter("ignore")
            source = resolve(name)
        if isinstance(source, SavedFolder):
            config = read_saved_config(source.path)
            arch, head, input_format = config["architecture"], config["head"], config.get("input_format")
        elif isinstance(source, Registered):
            arch, entry = source.arch, source.entry
            head = (entry.model_kwargs.get("head") if entry else None) or weight_entries.supported_heads(arch)[0]
            input_format = entry.input_format if entry else None
        else:
            return False, None
        return input_format == INPUT_FORMAT, head if weight_entries.input_kind(arch) == "text" else None
    except ZooError:
        return False, None


def _check_predict_inputs(args: argparse.Namespace) -> None:
    """Inputs as arguments or from --input, one of the two; --format and --out go with --input."""
    if args.input is not None and args.images:
        raise InvalidArgumentError(
            f"pass inputs as arguments or from a file (--input {args.input}), not both; put them all in the file"
        )
    if args.input is None and not args.images:
        raise InvalidArgumentError("no inputs: pass image files or SMILES as arguments, or a file of them with --input")
    if args.input is not None and getattr(args, "optimize", None):
        raise InvalidArgumentError("--optimize applies to images given as arguments; drop it with --input (run eager)")
    if args.input is None and (args.format or args.out):
        raise InvalidArgumentError("--format and --out write the rows of an --input file; add --input FILE")


def run_generate(args: argparse.Namespace) -> int:
    from zoo.architectures.generation import check_options

    check_options(args.max_new_tokens, args.temperature, args.top_k, args.top_p)  # before the model loads
    model = zoo.load(args.name, device=args.device)
    check_byte_lm(model)  # before the prompt is echoed
    sys.stdout.write(args.prompt.encode("utf-8", "surrogateescape").decode("utf-8", "replace"))  # bytes as given
    try:
        complete(
            model,
            args.prompt,
            args.max_new_tokens,
            args.seed,
            stream=_write_now,
            temperature=args.temperature,
            top_k=args.top_k,
            top_p=args.top_p,
        )
    finally:
        print()  # ends the streamed line, also before an error message
    return 0


def _write_now(text: str) -> None:
    sys.stdout.write(text)
    sys.stdout.flush()


def run_finetune(args: argparse.Namespace) -> int:
    from zoo.training import finetune  # each command imports what it runs, so predict stays light

    try:
        finetune.run(args, command=args.command_line)
    except KeyboardInterrupt:  # what continues it: a run that checkpointed resumes, one that did not starts again
        try:
            out = Path(args.out).expanduser()
            again = "no checkpoint yet: start it again" + (" with --overwrite" if out.is_dir() else "")
            if (out / "checkpoints" / "last.pt").is_file():
                again = "the same command with --resume continues it"
        except (OSError, RuntimeError, ValueError):  # an --out the system cannot look at: the plain message
            raise KeyboardInterrupt from None
        raise KeyboardInterrupt(f"{' '.join(str(args.out).split())}: {again}") from None
    return 0


def run_tune(args: argparse.Namespace) -> int:
    from zoo.training.tuning import tune

    tune.run(args)
    return 0


def run_eval(args: argparse.Namespace) -> int:
    """``zoo eval NAME``: the card's metrics re-measured on the CPU (an explicit --device other than
    cpu is refused); with --data, a score on the file, on --device (default: cuda if available)."""
    if args.data is not None:
        return _eval_on_file(args)
    flags = {
        "--out": args.out, "--images": args.images, "--label-field": args.label_field,
        "--device": args.device not in (None, "cpu"), "--label-delimiter": args.label_delimiter != " ",
        "--skip-bad-rows": args.skip_bad_rows, "--no-progress": args.no_progress, "--smiles-field": args.smiles_field != "smiles",
    }  # fmt: skip
    given = [flag for flag, value in flags.items() if value]
    if given:
        raise InvalidArgumentError(f"{', '.join(given)} go(es) with --data FILE (scoring on your data); add --data")
    from zoo.loading.resolve import Registered, SavedFolder, resolve
    from zoo.training.recipes import evaluate

    source = resolve(args.name)  # once: the entry whose card is re-measured (torchvision's names too)
    if not isinstance(source, Registered):
        folder = isinstance(source, SavedFolder)
        raise InvalidArgumentError(
            f"{args.name} is a {'saved folder' if folder else 'Hub repository'}: zoo eval re-measures a registered "
            "entry's card (zoo list --pretrained); score it on your held-out data with --data FILE"
            + (f" (its own validation figures: {Path(args.name) / 'metrics.json'})" if folder else "")
        )
    rows = evaluate.compare(source.name, args.limit)
    width = max([8, *(len(row["metric"]) + 2 for row in rows)])  # a metric's name never runs into its value
    print(f"{'evaluation':<24}{'metric':<{width}}{'claimed':>10}{'measured':>10}")
    for row in rows:
        flag = "" if row["ok"] else "   <-- differs from the card"
        print(f"{row['task']:<24}{row['metric']:<{width}}{row['claimed']:>10.4g}{row['measured']:>10.4g}{flag}")
    if all(row["ok"] for row in rows):
        print(f"{args.name}: every metric matches its card")
        return 0
    print(
        f"zoo: error: {args.name} does not reproduce its card (tolerance: {evaluate.ACCURACY_TOLERANCE} points "
        f"for accuracies, {evaluate.RELATIVE_TOLERANCE:.0%} for other metrics)",
        file=sys.stderr,
    )
    return 1


def _eval_on_file(args: argparse.Namespace) -> int:
    """``zoo eval NAME --data FILE``: the task's metrics on the file, printed, and as JSON with --out."""
    from zoo.training.scoring import format_scores, score_file

    if args.limit is not None:
        raise InvalidArgumentError("--limit takes the card's slice of its test set; with --data, score a shorter file")
    if args.out:  # before the model runs: not the data, nor a file of its folder or of the run folder NAME
        data = Path(args.data).expanduser()
        folders = [p for p in (data, Path(args.name), *weight_folders()) if p.is_dir()]
        check_output(Path(args.out).expanduser(), [data, *_listed_image(args, data)], folders)
    from zoo.training.data.molecules.molecule_files import MoleculeOptions

    reading = MoleculeOptions(
        label_field=args.label_field, label_delimiter=args.label_delimiter, skip_bad_rows=args.skip_bad_rows,
        smiles_field=args.smiles_field,
    )  # fmt: skip
    device = str(resolve_device(args.device))  # --data: the one default, cuda if available
    scores = score_file(
        args.name, args.data, device=device, batch_size=args.batch_size, reading=reading, images=args.images,
        progress=not args.no_progress, num_workers=args.num_workers,
    )  # fmt: skip
    print("\n".join(format_scores(scores)))
    if args.out:
        write_bytes_atomic(args.out, (strict_json(scores, indent=2) + "\n").encode())
        print(f"wrote {args.out}")
    return 0


def _listed_image(args: argparse.Namespace, data: Path) -> list[Path]:
    """``--out`` itself when it is an image file under the folder an image list's paths are in
    (``--images``, else the list's own folder): a listed image a JSON report would destroy."""
    out, root = Path(args.out).expanduser(), Path(args.images or data.parent).expanduser()
    inside = out.exists() and data.is_file() and out.resolve().is_relative_to(root.resolve())
    return [out] if inside and out.suffix.lower() in IMAGE_SUFFIXES else []


def run_demo(args: argparse.Namespace) -> int:
    from zoo.training import demo

    demo.run(args, command=args.command_line)
    return 0
