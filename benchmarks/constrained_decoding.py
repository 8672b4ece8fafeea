"""Benchmark JSON-schema constrained decoding libraries with HF transformers on CPU.

Measures, for xgrammar, llguidance, lm-format-enforcer (lmfe) and outlines, against an unconstrained baseline:
setup time (tokenizer info + grammar compile + processor build), wall time of the first generate() (lazy init,
e.g. torch.compile), seconds per generated token (median over --repeats) and its ratio to the baseline, how many
outputs parse with json.loads and validate against the schema, how many finished (EOS) vs. hit --tokens, the added
install footprint (from `pip install --dry-run --report` files) and any error / incompatibility with transformers 5.x.

Run (each library is imported lazily; one that is missing is reported as 'not installed'):

    /tmp/cdvenv/bin/python benchmarks/constrained_decoding.py --model /path/to/smollm2-135m \
        [--libs xgrammar,llguidance,lmfe,outlines,whale] [--tokens 120] [--repeats 3] [--out FILE.json]

Side environment (keeps the project .venv untouched; its packages are seen through a .pth file):

    python3.11 -m venv /tmp/cdvenv
    echo $PWD/.venv/lib/python3.11/site-packages > /tmp/cdvenv/lib/python3.11/site-packages/whale.pth
    /tmp/cdvenv/bin/pip install --dry-run --report /tmp/rep-<dist>.json <dist>   # what it would add
    /tmp/cdvenv/bin/pip install xgrammar llguidance lm-format-enforcer outlines

--reports (default /tmp) is where rep-<dist>.json live; --wheels (default /tmp/wheels) optionally holds the
downloaded wheel files so that download sizes can be given besides the installed (RECORD) sizes.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.metadata as md
import json
import statistics
import sys
import time
from pathlib import Path

SCHEMA = {
    "type": "object",
    "properties": {
        "instruction": {"type": "string", "maxLength": 300},
        "template": {"type": "string", "maxLength": 300},
        "k": {"type": "integer", "minimum": 0, "maximum": 16},
        "select": {"enum": ["random", "first", "similar"]},
    },
    "required": ["instruction", "template", "k", "select"],
    "additionalProperties": False,
}
PROMPT = (
    "Write a JSON object with keys instruction, template, k and select that describes how to ask a language model "
    "to add two numbers. 'instruction' is the task instruction, 'template' is a prompt template with {a} and {b} "
    "placeholders, 'k' is the number of few-shot examples (0-16) and 'select' is one of random, first, similar. "
    'Example shape: {"instruction": "...", "template": "...", "k": 2, "select": "random"}. Answer with JSON only.'
)
SAMPLING = {"do_sample": True, "temperature": 0.7, "top_p": 0.95}
SCHEMA_ENUM = SCHEMA["properties"]["select"]["enum"]
DISTS = {
    "xgrammar": "xgrammar",
    "llguidance": "llguidance",
    "lmfe": "lm-format-enforcer",
    "outlines": "outlines",
    "whale": "llguidance",
}
PROJECT_SITE = str(Path(__file__).resolve().parents[1] / ".venv" / "lib" / "python3.11" / "site-packages")


def install_footprint(dist: str, reports: Path, wheels: Path) -> dict:
    """Packages a `pip install --dry-run --report` would add, their sizes, and version changes vs the project venv."""
    rep = reports / f"rep-{dist}.json"
    if not rep.exists():
        return {"added_pkgs": "n/a (no report)", "download_mb": None, "installed_mb": None, "changes": []}
    project = {d.metadata["Name"].lower().replace("_", "-"): d.version for d in md.distributions(path=[PROJECT_SITE])}
    added, changes, dl, disk = [], [], 0.0, 0.0
    for item in json.loads(rep.read_text())["install"]:
        name, ver = item["metadata"]["name"], item["metadata"]["version"]
        old = project.get(name.lower().replace("_", "-"))
        if old == ver:
            continue  # only the side venv lacked it (e.g. setuptools); the project already has this version
        if old is not None:
            changes.append(f"{name} {old}->{ver}")
        added.append(f"{name}=={ver}")
        wheel = wheels / item["download_info"]["url"].rsplit("/", 1)[-1]
        dl += wheel.stat().st_size / 1e6 if wheel.exists() else 0.0
        with contextlib.suppress(md.PackageNotFoundError):
            disk += sum(f.size or 0 for f in md.distribution(name).files or []) / 1e6
    return {
        "added_pkgs": " ".join(added),
        "download_mb": round(dl, 1),
        "installed_mb": round(disk, 1),
        "changes": changes,
    }


def build_xgrammar(model, tok, schema_str):
    import xgrammar as xgr
    from xgrammar.contrib.hf import LogitsProcessor

    info = xgr.TokenizerInfo.from_huggingface(tok, vocab_size=model.config.vocab_size)
    compiled = xgr.GrammarCompiler(info).compile_json_schema(schema_str)
    return lambda: {"logits_processor": [LogitsProcessor(compiled)]}  # single-use: new one per generate()


def build_llguidance(model, tok, schema_str):
    import llguidance
    import llguidance.hf
    import llguidance.torch as llt
    import transformers

    lltok = llguidance.hf.from_tokenizer(tok, n_vocab=model.config.vocab_size)
    grammar = llguidance.LLMatcher.grammar_from_json_schema(schema_str)
    err = llguidance.LLMatcher.validate_grammar(grammar, lltok)
    if err:
        raise ValueError(f"llguidance grammar error: {err}")

    class LLGuidanceProcessor(transformers.LogitsProcessor):  # llguidance ships no HF LogitsProcessor
        def __init__(self):
            self.matcher = llguidance.LLMatcher(lltok, grammar)
            self.mask = llt.allocate_token_bitmask(1, lltok.vocab_size)
            self.n_seen = None

        def __call__(self, input_ids, scores):
            if self.n_seen is not None:
                self.matcher.consume_tokens(input_ids[0, self.n_seen :].tolist())
            self.n_seen = input_ids.shape[1]
            if self.matcher.is_error():
                raise RuntimeError(self.matcher.get_error())
            llt.fill_next_token_bitmask(self.matcher, self.mask, 0)
            llt.apply_token_bitmask_inplace(scores, self.mask)
            return scores

    return lambda: {"logits_processor": [LLGuidanceProcessor()]}


def build_lmfe(model, tok, schema_str):
    from lmformatenforcer import JsonSchemaParser

    try:
        from lmformatenforcer.integrations import transformers as lmfe_hf
    except ImportError as exc:  # transformers 5 moved PreTrainedTokenizerBase out of transformers.tokenization_utils
        import transformers.tokenization_utils as tu
        from transformers.tokenization_utils_base import PreTrainedTokenizerBase

        tu.PreTrainedTokenizerBase = PreTrainedTokenizerBase
        sys.modules.pop("lmformatenforcer.integrations.transformers", None)
        from lmformatenforcer.integrations import transformers as lmfe_hf

        build_lmfe.note = f"stock import fails: {type(exc).__name__}: {exc.__context__ or exc}; ran with shim"
    data = lmfe_hf.build_token_enforcer_tokenizer_data(tok, vocab_size=len(tok))
    return lambda: {
        "prefix_allowed_tokens_fn": lmfe_hf.build_transformers_prefix_allowed_tokens_fn(
            data, JsonSchemaParser(json.loads(schema_str))
        )
    }


def build_outlines(model, tok, schema_str):
    import outlines
    from outlines.backends import get_json_schema_logits_processor

    omodel = outlines.from_transformers(model, tok)
    proc = get_json_schema_logits_processor("outlines_core", omodel, schema_str)

    def kwargs():
        proc.reset()
        return {"logits_processor": [proc]}

    return kwargs


def build_whale(model, tok, schema_str):
    """WHALE's shipped processor (whale_core/proposers/grammar.py: llguidance, the mask applied without
    torch.compile, compact one-line JSON)."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the side venv sees .venv's packages, not the repo
    from whale_core.proposers.grammar import Grammar

    grammar = Grammar(tok, vocab_size=model.config.vocab_size)
    schema = json.loads(schema_str)
    return lambda: {"logits_processor": [grammar.json_schema(schema)]}


BUILDERS = {
    "xgrammar": build_xgrammar,
    "llguidance": build_llguidance,
    "lmfe": build_lmfe,
    "outlines": build_outlines,
    "whale": build_whale,
}


def check(text: str) -> bool:
    try:
        obj = json.loads(text)
    except ValueError:
        return False
    try:
        import jsonschema
    except ImportError:
        if not (isinstance(obj, dict) and set(obj) == set(SCHEMA["properties"])):
            return False
        strs_ok = all(isinstance(obj[k], str) and len(obj[k]) <= 300 for k in ("instruction", "template"))
        return strs_ok and type(obj["k"]) is int and 0 <= obj["k"] <= 16 and obj["select"] in SCHEMA_ENUM
    try:
        jsonschema.validate(obj, SCHEMA)
        return True
    except jsonschema.ValidationError:
        return False


def err_str(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {str(exc).splitlines()[0][:160] if str(exc) else ''}"


def run_lib(name, model, tok, inputs, args) -> dict:
    import torch

    row = dict.fromkeys(("download_mb", "installed_mb", "setup_s", "first_gen_s", "s_per_token", "ratio"))
    row.update(library=name, version="-", added_pkgs="", changes=[], valid=0, finished=0, total=0, error="", samples=[])
    if name != "baseline":
        dist = DISTS[name]
        row.update(install_footprint(dist, Path(args.reports), Path(args.wheels)))
        try:
            row["version"] = md.version(dist)
        except md.PackageNotFoundError:
            row["error"] = "not installed"
            return row
    schema_str = json.dumps(SCHEMA)
    try:
        t0 = time.perf_counter()
        make = (lambda: {}) if name == "baseline" else BUILDERS[name](model, tok, schema_str)
        first = make()  # the first processor build is part of setup
        row["setup_s"] = round(time.perf_counter() - t0, 3)
        row["error"] = getattr(BUILDERS.get(name), "note", "")
    except Exception as exc:  # report any incompatibility
        row["error"] = err_str(exc)
        return row
    n_prompt = inputs["input_ids"].shape[1]
    per_tok = []
    for rep in range(args.repeats):
        try:
            kw = first if rep == 0 else make()
            torch.manual_seed(args.seed + rep)
            t0 = time.perf_counter()
            with torch.no_grad():
                out = model.generate(
                    **inputs, **kw, **SAMPLING, max_new_tokens=args.tokens, pad_token_id=tok.eos_token_id
                )
            dt = time.perf_counter() - t0
        except Exception as exc:
            row["error"] = (row["error"] + " | " if row["error"] else "") + f"generate: {err_str(exc)}"
            break
        gen = out[0, n_prompt:].tolist()
        finished = tok.eos_token_id in gen
        text = tok.decode(gen, skip_special_tokens=True).strip()
        row["first_gen_s"] = row["first_gen_s"] or round(dt, 2)
        per_tok.append(dt / max(len(gen), 1))
        row["total"] += 1
        row["finished"] += finished
        row["valid"] += check(text)
        row["samples"].append({"tokens": len(gen), "finished": finished, "text": text})
    if per_tok:
        row["s_per_token"] = round(statistics.median(per_tok), 4)
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--libs", default="xgrammar,llguidance,lmfe,outlines,whale")
    ap.add_argument("--tokens", type=int, default=120)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: torch default)")
    ap.add_argument("--reports", default="/tmp")
    ap.add_argument("--wheels", default="/tmp/wheels")
    ap.add_argument("--out", default="/tmp/constrained_decoding.json")
    args = ap.parse_args()

    import torch
    import transformers

    if args.threads:
        torch.set_num_threads(args.threads)
    tok = transformers.AutoTokenizer.from_pretrained(args.model)
    model = transformers.AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32).eval()
    ids = tok.apply_chat_template(
        [{"role": "user", "content": PROMPT}], add_generation_prompt=True, return_tensors="pt", return_dict=True
    )
    inputs = {"input_ids": ids["input_ids"], "attention_mask": ids["attention_mask"]}
    print(
        f"torch {torch.__version__}, transformers {transformers.__version__}, threads {torch.get_num_threads()}, "
        f"prompt {inputs['input_ids'].shape[1]} tokens, max_new_tokens {args.tokens}, repeats {args.repeats}",
        flush=True,
    )

    with torch.no_grad():  # warm-up so the baseline does not pay for first-call initialisation
        model.generate(**inputs, max_new_tokens=4, do_sample=False, pad_token_id=tok.eos_token_id)
    rows = []
    for name in ["baseline", *[x.strip() for x in args.libs.split(",") if x.strip()]]:
        if name != "baseline" and name not in BUILDERS:
            rows.append({"library": name, "error": "unknown library"})
            continue
        print(f"... {name}", flush=True)
        rows.append(run_lib(name, model, tok, inputs, args))
    base = rows[0].get("s_per_token")
    for r in rows:
        if r.get("s_per_token") and base:
            r["ratio"] = round(r["s_per_token"] / base, 2)

    widths = (10, 8, 12, 8, 9, 8, 6, 6, 8)
    head = ("library", "version", "dl/disk MB", "setup s", "1st gen s", "s/token", "ratio", "valid", "finished")
    print("\n" + " | ".join(h.ljust(w) for h, w in zip(head, widths, strict=True)) + " | error")
    for r in rows:
        mb = "-" if r.get("download_mb") is None else f"{r['download_mb']}/{r['installed_mb']}"
        keys = ("library", "version", "setup_s", "first_gen_s", "s_per_token", "ratio")
        lib, ver, *nums = (r.get(k) for k in keys)
        tot = r.get("total", 0)
        vals = [lib, ver, mb, *nums, f"{r.get('valid', 0)}/{tot}", f"{r.get('finished', 0)}/{tot}"]
        cells = [str("-" if v is None else v).ljust(w) for v, w in zip(vals, widths, strict=True)]
        print(" | ".join(cells) + " | " + (r.get("error") or ""))
    print("\nadded packages:")
    for r in rows[1:]:
        print(
            f"  {r['library']}: {r.get('added_pkgs') or '-'}"
            + (f"  CHANGES: {r['changes']}" if r.get("changes") else "")
        )
    print("\nfirst sample per library:")
    for r in rows:
        if r.get("samples"):
            s = r["samples"][0]
            print(f"  {r['library']} ({s['tokens']} tok, finished={s['finished']}): {s['text'][:200]!r}")
    Path(args.out).write_text(json.dumps({"tokens": args.tokens, "repeats": args.repeats, "rows": rows}, indent=2))
    print(f"\nwrote {args.out}")


if __name__ == "__main__":
    main()
