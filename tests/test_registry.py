"The one registry type: lazy entries resolve to what their modules register under the same name; names list without imports."
import json, subprocess, sys
import pytest
from pope_audit.foundation.registry import Registry, READOUTS, BENCHMARKS, READERS, FAMILIES, CORRECTIONS, TEMPLATES

REGISTRIES = [READOUTS, BENCHMARKS, READERS, FAMILIES, CORRECTIONS, TEMPLATES]


@pytest.mark.parametrize('reg', REGISTRIES, ids=lambda r: r.kind)
def test_every_lazy_entry_resolves_to_its_name(reg):
    for name in reg.names():
        obj = reg[name]
        own = getattr(obj, 'name', None) or getattr(obj, 'family', None) or getattr(obj, 'kind', None)
        assert own == name, (reg.kind, name, own)


def test_names_import_nothing():
    code = ('import sys, json; from pope_audit.foundation.registry import READOUTS, BENCHMARKS, FAMILIES, CORRECTIONS, TEMPLATES; '
            'names = [list(r) for r in (READOUTS, BENCHMARKS, FAMILIES, CORRECTIONS, TEMPLATES)]; print(json.dumps(sorted(sys.modules)))')
    mods = json.loads(subprocess.run([sys.executable, '-c', code], capture_output=True, text=True, check=True).stdout)
    assert not {'pandas', 'numpy', 'torch', 'transformers'} & set(mods)
    assert not [m for m in mods if m.startswith('pope_audit.') and m.count('.') == 2 and m != 'pope_audit.foundation.registry']   # the layers' packages are empty


def test_duplicates_refused():
    r = Registry('thing', {'a': 'pope_audit.foundation.core:InputError'})
    def f(): pass
    def g(): pass
    r.add('f', f); r.add('f', f)
    with pytest.raises(ValueError, match='already registered'): r.add('f', g)
    with pytest.raises(ValueError, match='already declared in pope_audit.foundation.core'): r.add('a', g, 'pope_audit.foundation.paper')
    with pytest.raises(ValueError, match='already registered'): r.lazy('f', 'pope_audit.foundation.paper:PAPER')
    assert r['a'].__name__ == 'InputError' and list(r) == ['a', 'f']
    with pytest.raises(KeyError): r['nonesuch']


def test_a_benchmark_added_through_the_registry_alone(tmp_path, monkeypatch):
    "A benchmark from outside the package (tests/toybench.py) needs its module and three lazy lines, nothing else: score reads and scores it."
    from pathlib import Path
    from pope_audit.benchmarks.scoring import load_answers, score_summary
    from pope_audit.foundation.readouts import SCOPED
    monkeypatch.syspath_prepend(str(Path(__file__).parent))
    BENCHMARKS.lazy('toy', 'toybench:TOY'); READERS.lazy('toy', 'toybench:TOY_READER'); READOUTS.lazy('toy', 'toybench:toy_rule')
    try:
        (tmp_path/'q.toyq.json').write_text(json.dumps([dict(id=i, image=f'{i // 2}.jpg', question=f'Is there a {o}?', label=l)
                                                        for i, (o, l) in enumerate([('cat', 'yes'), ('dog', 'no'), ('cup', 'yes'), ('car', 'no')])]))
        (tmp_path/'a.toy.json').write_text(json.dumps({'0': 'Yes.', '1': 'No', '2': 'no, there is not', '3': 'Maybe'}))
        qs, _ = BENCHMARKS['toy'].load([tmp_path/'q.toyq.json'])
        ans = load_answers(tmp_path/'a.toy.json', questions=qs)
        assert ans.kind == 'toy' and [r.text for r in ans.records] == ['Yes.', 'No', 'no, there is not', 'Maybe']
        from pope_audit.benchmarks.scoring import predictions
        p = predictions(ans.records)
        assert list(p['toy']) == ['yes', 'no', 'no', 'unknown'] and 'toy' in p.columns
    finally:
        for r in (BENCHMARKS, READERS, READOUTS): r.remove('toy')
        SCOPED.pop('toy', None)
    assert 'toy' not in BENCHMARKS and 'toy' not in READERS.names()
