"""The notebooks: stored without outputs, and each runs top to bottom on a small grid."""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest

NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"
#: Small settings appended after each notebook's "parameters" cell (papermill's convention).
SMALL = {
    "gain_heatmap.ipynb": "SERVERS = 5\nGRID = 8\n",
    "calibration.ipynb": "N_BOOTSTRAP = 60\nGRID = 6\n",
}
#: Cases: notebook, and whether to feed it synthetic measurements with a known positive cost
#: (the calibration notebook otherwise reads the repository's real data, whatever it shows).
CASES = [("gain_heatmap.ipynb", False), ("calibration.ipynb", False), ("calibration.ipynb", True)]


def notebook_paths() -> list[Path]:
    return sorted(NOTEBOOKS.glob("*.ipynb"))


def test_the_expected_notebooks_exist():
    assert {path.name for path in notebook_paths()} >= set(SMALL)


@pytest.mark.parametrize("path", notebook_paths(), ids=lambda p: p.name)
def test_stored_without_outputs(path):
    notebook = nbformat.read(path, as_version=4)
    nbformat.validate(notebook)
    for index, cell in enumerate(notebook.cells):
        if cell.cell_type == "code":
            assert cell.outputs == [], f"{path.name} cell {index} has stored outputs"
            assert cell.execution_count is None, f"{path.name} cell {index} has an execution count"


@pytest.mark.slow
@pytest.mark.parametrize("name, synthetic", CASES)
def test_runs_on_a_small_grid(name, synthetic, tmp_path):
    from nbclient import NotebookClient

    from cosample.costmodel.model import simulate

    notebook = nbformat.read(NOTEBOOKS / name, as_version=4)
    position = next(
        i for i, cell in enumerate(notebook.cells) if "parameters" in cell.metadata.get("tags", [])
    )
    override = SMALL[name] + f"OUT = {str(tmp_path / 'figures')!r}\n"
    if synthetic:
        data = tmp_path / "measurements.csv"
        simulate({"sflow": 0.9, "mirror": 0.3}, 40_000, seed=5).to_csv(data, index=False)
        override += f"DATA = {str(data)!r}\n"
    notebook.cells.insert(position + 1, nbformat.v4.new_code_cell(override))
    # the kernel runs in the repository root, as a reader's would, with this test's interpreter
    client = NotebookClient(
        notebook,
        timeout=300,
        kernel_name="python3",
        resources={"metadata": {"path": str(NOTEBOOKS.parent)}},
    )
    client.execute()
    errors = [
        output
        for cell in notebook.cells
        if cell.cell_type == "code"
        for output in cell.outputs
        if output.output_type == "error"
    ]
    assert not errors
    if synthetic:  # the calibrated coefficients reached the last table
        last = notebook.cells[-1].outputs[0]["data"]["text/plain"]
        assert "this calibration" in last
    figures = sorted((tmp_path / "figures").glob("*.png"))
    assert figures and all(figure.stat().st_size > 10_000 for figure in figures)
