"""The `cpulab` group: every command module's commands, and the entry point that turns
click's usage errors and a store's errors into one line with exit status 2."""
from __future__ import annotations

import sys

import click

from cpulab.cli import bisect, ci, cluster, explain, history, machine_probes, memory, new, results, run, timing
from cpulab.cli.common import fail
from cpulab.measure.schedule.session import Interrupted
from cpulab.store.db import StoreError


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="cpulab")
def cli():
    """cpulab: is X faster than Y on this work, by how much, and why?"""


for module in (run, new, ci, bisect, results, history, machine_probes, memory, cluster, explain, timing):
    for command in module.COMMANDS:
        cli.add_command(command)


# Shell completion asks through this variable whatever the program is called (`cpulab`,
# `python -m cpulab.cli`): README, Shell completion.
COMPLETE_VAR = "_CPULAB_COMPLETE"

# How long a thread running Python keeps the interpreter from one that waits for it
# (Python's default: 5 ms).  The thread that hands a group's token over wakes hundreds of
# times a second, while the other CPU's threads link placements and read code in Python:
# at 5 ms each wake could wait that long with the measured processes idle (seeds runs,
# Zen 4, four each way: the alone experiments' start-up 3.7-5.3 s at 5 ms, 3.6-4.0 s at
# 0.5 ms; the lanes' 5.3-7.8 s and 4.3-5.4 s; the whole run 98-105 s and 94-102 s).
SWITCH_INTERVAL_S = 0.0005


def main() -> None:
    """Entry point: click's usage errors become one line and exit status 2."""
    sys.setswitchinterval(SWITCH_INTERVAL_S)
    try:
        cli.main(standalone_mode=False, complete_var=COMPLETE_VAR)
    except click.exceptions.UsageError as e:
        where = f"{e.ctx.command_path}: " if e.ctx else ""
        fail(f"{where}{e.format_message()}")
    except click.exceptions.Abort as e:  # click's wrapping of an interrupt outside a run
        sys.exit(e.__cause__.exit_status if isinstance(e.__cause__, Interrupted) else 130)
    except click.ClickException as e:
        fail(e.format_message())
    except StoreError as e:
        fail(str(e))
    # What the operating system refused (a file that cannot be written, a full disk) is the
    # user's to fix, not cpulab's bug: one line naming the file and the cause.  A run stopped
    # by one keeps what it measured: every sample is written as it is taken.
    except OSError as e:
        fail(f"{e.filename}: {e.strerror}" if e.filename and e.strerror else str(e) or type(e).__name__)
    except RecursionError:
        fail("an input is nested too deeply to read")
    except MemoryError:
        fail("out of memory")
