"""Shell completion of cpulab's own names, by click's convention (the shell asks the
program through _CPULAB_COMPLETE; README, Shell completion): workloads, variants, built-in
plans (and TOML files), and the stored run ids.  A completer answers from what this
machine has and never fails: a store that cannot be read completes nothing."""
from __future__ import annotations

from pathlib import Path

from click.shell_completion import CompletionItem

from cpulab import paths, workloads
from cpulab.plan import plan as plans
from cpulab.plan import toolchain
from cpulab.store.db import Store, StoreError


def _matching(names, incomplete: str, help_of=lambda name: None) -> list[CompletionItem]:
    """The names (in the order given) that start with what was typed, each with its help."""
    return [CompletionItem(n, help=help_of(n)) for n in names if n.startswith(incomplete)]


def workload_names(ctx, param, incomplete: str) -> list[CompletionItem]:
    return _matching(sorted(workloads.registry()), incomplete, lambda n: workloads.get(n).description.split(";")[0][:60])


def variant_names(ctx, param, incomplete: str) -> list[CompletionItem]:
    return _matching(list(toolchain.BUILTIN), incomplete, lambda n: " ".join(toolchain.get(n).cflags))


def plan_names(ctx, param, incomplete: str) -> list[CompletionItem]:
    """Built-in plans by name, and TOML files by path (the shell's own file completion)."""
    return _matching(sorted(p.stem for p in plans.PLAN_DIR.glob("*.toml")), incomplete) + \
        [CompletionItem(incomplete, type="file")]


def run_ids(ctx, param, incomplete: str) -> list[CompletionItem]:
    db = Path(ctx.params.get("db") or paths.default_db())
    try:
        runs = {str(r.id): r for r in Store(db, create=False).runs()}
    except StoreError:
        return []
    return _matching(runs, incomplete, lambda i: f"{runs[i].status}, {runs[i].results} results"
                     + (f", {runs[i].label}" if runs[i].label else ""))
