"""The commands a document tells an operator to type, as the document writes them.

A command block is a fenced ``sh`` block whose first line says where it runs::

    ```sh
    # on controller.example
    systemctl enable --now cosample-collector
    ```

``# on NAME`` (or ``# on NAME and NAME``), then optionally ``: ...`` saying more. ``repeat
until`` in that line means the operator runs it again until it succeeds (the loop takes minutes
to close); ``: install`` marks the installation from the network. ``run_block`` runs a block on
the machines it names (``tests/ops/machines.py``), replacing ``scp`` by a copy between them.
"""

from __future__ import annotations

import re
import shlex
import time
from dataclasses import dataclass
from pathlib import Path

_FENCE = re.compile(r"^(?P<indent> *)```(?P<language>\w*)\s*$")
_MARKER = re.compile(r"^# on (?P<names>[\w.-]+(?: and [\w.-]+)*)(?P<rest>.*)$")


@dataclass(frozen=True)
class Block:
    document: str
    line: int  # of the first line of the block's text
    marker: str
    machines: tuple[str, ...]
    script: str

    @property
    def repeat(self) -> bool:
        return "repeat until" in self.marker

    def where(self) -> str:
        return f"{self.document}:{self.line}"


def command_blocks(path: Path) -> list[Block]:
    """Every ``sh`` block of ``path`` that starts with a ``# on`` line, in document order."""
    blocks, lines = [], path.read_text().splitlines()
    k = 0
    while k < len(lines):
        fence = _FENCE.match(lines[k])
        if not fence:
            k += 1
            continue
        indent = fence.group("indent")  # a block in a list item: its lines indented alike
        end = next(j for j in range(k + 1, len(lines)) if lines[j].strip().startswith("```"))
        body = [
            line[len(indent) :] if line.startswith(indent) else line for line in lines[k + 1 : end]
        ]
        marker = _MARKER.match(body[0]) if body else None
        if fence.group("language") == "sh" and marker:
            blocks.append(
                Block(
                    path.name,
                    k + 2,
                    body[0],
                    tuple(marker.group("names").split(" and ")),
                    "\n".join(body[1:]) + "\n",
                )
            )
        k = end + 1
    return blocks


def run_block(block: Block, machines: dict, repeat_timeout_s: float = 600.0) -> list[str]:
    """Run ``block`` on each machine it names (``repeat until``: again every 5 s until it
    succeeds, for at most ``repeat_timeout_s``); returns its output, raises AssertionError
    naming the block, the command's output and the daemons' logs when it fails."""
    outputs = []
    for name in block.machines:
        machine = machines[name]
        deadline = time.monotonic() + (repeat_timeout_s if block.repeat else 0.0)
        while True:
            ok, output = _run_once(block, machine, machines)
            if ok or time.monotonic() > deadline:
                break
            time.sleep(5)
        if not ok:
            logs = "\n".join(m.logs() for m in machines.values())
            raise AssertionError(
                f"{block.where()} failed on {name}"
                f"{' (repeated for %g s)' % repeat_timeout_s if block.repeat else ''}:\n"
                f"{block.script}\n--- output\n{output}\n--- logs\n{logs}"
            )
        outputs.append(output)
    return outputs


def _run_once(block: Block, machine, machines: dict) -> tuple[bool, str]:
    """The block's lines in order: runs of shell lines by bash, each ``scp`` line by copying
    the file between the machines (no ssh here)."""
    output, pending = [], []
    for line in block.script.splitlines() + ["scp"]:  # a last "scp" flushes what is pending
        if not line.startswith("scp"):
            pending.append(line)
            continue
        if pending and any(part.strip() for part in pending):
            done = machine.shell("\n".join(pending) + "\n", timeout_s=300)
            output.append(done.stdout + done.stderr)
            if done.returncode != 0:
                return False, "".join(output) + f"(exit status {done.returncode})"
        pending = []
        if line.strip() != "scp":
            ok, said = _copy(line, machine, machines)
            output.append(said)
            if not ok:
                return False, "".join(output)
    return True, "".join(output)


def _copy(line: str, machine, machines: dict) -> tuple[bool, str]:
    """``scp [HOST:]FROM [HOST:]TO`` as a copy between the machines' files."""
    words = [w for w in shlex.split(line)[1:] if not w.startswith("-")]
    if len(words) != 2:
        return False, f"{line}: expected scp SOURCE TARGET\n"
    ends = []
    for word in words:
        host, _, path = word.rpartition(":")
        ends.append((machines[host] if host else machine, path))
    (source, source_path), (target, target_path) = ends
    read = source.shell(f"cat -- {shlex.quote(source_path)}")
    if read.returncode != 0:
        return False, f"{line}: {read.stderr}"
    quoted = shlex.quote(target_path)
    write = target.shell(
        f"if [ -d {quoted} ]; then cat > {quoted}/{shlex.quote(Path(source_path).name)}; "
        f"else cat > {quoted}; fi",
        stdin=read.stdout,
    )
    if write.returncode != 0:
        return False, f"{line}: {write.stderr}"
    return True, ""
