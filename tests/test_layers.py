"""The package's layers hold (`pope_audit.layers`: a table module -> layer, bottom to top): no import circles (imports inside
functions count), no computed imports to hide one, no import into a higher layer, each notebook in its layer's folder."""
import re
from pathlib import Path
from pope_audit.layers import LAYERS, import_graph, cycles, upward, computed_imports, layer_of

root = Path(__file__).resolve().parent.parent


def test_every_module_has_a_layer():
    assert set(import_graph()) == {m for ms in LAYERS.values() for m in ms}


def test_no_computed_imports():
    assert computed_imports() == []


def test_no_import_circles():
    assert cycles(import_graph()) == []


def test_no_upward_import():
    assert upward(import_graph()) == []


def test_record_layer_knows_no_corrections_or_runner():
    "The record and readout layer (foundation) reaches nothing above it, directly or through another module."
    g, seen, todo = import_graph(), set(), list(LAYERS['foundation'])
    while todo:
        m = todo.pop()
        if m not in seen: seen.add(m); todo += g[m]
    assert seen <= set(LAYERS['foundation']), sorted(seen - set(LAYERS['foundation']))


def test_an_upward_import_is_caught(tmp_path):
    "A copy of the package where the record layer imports the runner inside a function: both rules see it."
    for p in (root/'pope_audit').glob('*.py'): (tmp_path/p.name).write_text(p.read_text())
    f = tmp_path/'metrics.py'
    f.write_text(f.read_text() + '\ndef _late():\n    from pope_audit.inference import run\n    return run\n')
    g = import_graph(tmp_path)
    assert ('metrics', 'inference') in upward(g)
    assert any('metrics' in c and 'inference' in c for c in cycles(g))   # inference reads metrics through readouts/scoring


def test_notebooks_sit_in_their_layers_folder():
    found = {}
    for nb in (root/'nbs').rglob('*.ipynb'):
        if '.ipynb_checkpoints' in nb.parts: continue
        m = re.search(r'#\|\s*default_exp\s+(\w+)', nb.read_text())
        if m: found[m[1]] = nb.parent.name
    assert set(found) == set(import_graph())
    assert {m: f for m, f in found.items() if f != layer_of(m)} == {}
