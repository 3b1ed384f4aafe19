"The one registry type: lazy entries resolve to what their modules register under the same name; names list without imports."
import json, subprocess, sys
import pytest
from pope_audit.registry import Registry, READOUTS, BENCHMARKS, READERS, FAMILIES, CORRECTIONS, TEMPLATES

REGISTRIES = [READOUTS, BENCHMARKS, READERS, FAMILIES, CORRECTIONS, TEMPLATES]


@pytest.mark.parametrize('reg', REGISTRIES, ids=lambda r: r.kind)
def test_every_lazy_entry_resolves_to_its_name(reg):
    for name in reg.names():
        obj = reg[name]
        own = getattr(obj, 'name', None) or getattr(obj, 'family', None) or getattr(obj, 'kind', None)
        assert own == name, (reg.kind, name, own)


def test_names_import_nothing():
    code = ('import sys, json; from pope_audit.registry import READOUTS, BENCHMARKS, FAMILIES, CORRECTIONS, TEMPLATES; '
            'names = [list(r) for r in (READOUTS, BENCHMARKS, FAMILIES, CORRECTIONS, TEMPLATES)]; print(json.dumps(sorted(sys.modules)))')
    mods = json.loads(subprocess.run([sys.executable, '-c', code], capture_output=True, text=True, check=True).stdout)
    assert not {'pandas', 'numpy', 'torch', 'transformers'} & set(mods)
    assert not [m for m in mods if m.startswith('pope_audit.') and m != 'pope_audit.registry']


def test_duplicates_refused():
    r = Registry('thing', {'a': 'pope_audit.core:InputError'})
    def f(): pass
    def g(): pass
    r.add('f', f); r.add('f', f)
    with pytest.raises(ValueError, match='already registered'): r.add('f', g)
    with pytest.raises(ValueError, match='already declared in pope_audit.core'): r.add('a', g, 'pope_audit.paper')
    with pytest.raises(ValueError, match='already registered'): r.lazy('f', 'pope_audit.paper:PAPER')
    assert r['a'].__name__ == 'InputError' and list(r) == ['a', 'f']
    with pytest.raises(KeyError): r['nonesuch']
