"The precision audit: every mode on CPU (bitsandbytes 8-bit and 4-bit included), the highest precision as reference, a repeat that flips nothing, refusals with reasons, resumable runs."
import json
import pandas as pd
import pytest
from pope_audit.interface.precision import precision_audit, mode_support, MODES
from pope_audit.foundation.core import InputError


@pytest.fixture(scope='module')
def tiny():
    from pope_audit.models.tinyvlm import tiny_vlm_dir
    return str(tiny_vlm_dir('llava15'))


def test_every_mode_on_cpu_with_control(tiny, bench, tmp_path):
    qs, imgs = bench
    t = precision_audit(tmp_path, tiny, ['nf4', 'int8', 'bf16', 'fp16', 'fp32'], qs, imgs, device='cpu',
                        n_boot=100, limit=3, max_new_tokens=2, quiet=True)
    assert list(t['mode'].unique()) == ['fp32', 'bf16', 'fp16', 'int8', 'nf4', 'fp32-repeat']
    ident = {m: json.loads((tmp_path/'runs'/m/'manifest.json').read_text())['identity'] for m in MODES}
    assert [ident[m]['dtype'] for m in ('fp32', 'bf16', 'fp16')] == ['float32', 'bfloat16', 'float16']
    assert ident['int8']['quantization']['method'] == 'bitsandbytes-8bit'
    assert ident['nf4']['quantization']['method'] == 'bitsandbytes-4bit' and ident['nf4']['quantization']['quant_type'] == 'nf4'
    ctl = t[t['mode'] == 'fp32-repeat']
    assert ctl.changed.sum() == 0 and ctl.max_margin_change.max() == 0 and (ctl.f1_shift == 0).all()
    # every lower precision really changed the logits
    for m in ('int8', 'nf4', 'bf16'):
        assert t[(t['mode'] == m) & (t.readout == 'derived')].max_margin_change.max() > 0
    # the reference's F1 is every row's f1_ref; flips add up to the shift's direction
    ref = t[t['mode'] == 'fp32'].set_index(['split', 'readout']).f1
    for m, g in t.groupby('mode'):
        pd.testing.assert_series_equal(g.set_index(['split', 'readout']).f1_ref, ref, check_names=False)
    csv = pd.read_csv(tmp_path/'precision.csv')
    assert {'mode', 'split', 'readout', 'f1', 'f1_shift', 'shift_lo', 'shift_hi', 'yes_to_no', 'no_to_yes', 'mcnemar_p', 'max_margin_change'} <= set(csv.columns)
    gap = pd.read_csv(tmp_path/'gap.csv')
    assert set(gap['mode']) == set(t['mode']) and (gap[gap['mode'] == 'fp32-repeat'].gap_change == 0).all()
    # resumable: a second call re-runs nothing and gives the same table
    before = (tmp_path/'runs'/'nf4'/'records.jsonl').read_bytes()
    t2 = precision_audit(tmp_path, tiny, ['fp32', 'bf16', 'fp16', 'int8', 'nf4'], qs, imgs, device='cpu',
                         n_boot=100, limit=3, max_new_tokens=2, quiet=True)
    assert (tmp_path/'runs'/'nf4'/'records.jsonl').read_bytes() == before
    pd.testing.assert_frame_equal(t, t2)


def test_refused_modes_say_why(tiny, bench, tmp_path, monkeypatch, capsys):
    import importlib.util
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, 'find_spec', lambda n, *a: None if n == 'bitsandbytes' else real(n, *a))
    assert mode_support('nf4') == 'bitsandbytes is not installed (pip install bitsandbytes)'
    qs, imgs = bench
    t = precision_audit(tmp_path, tiny, ['fp32', 'nf4'], qs, imgs, device='cpu', n_boot=0, limit=2, max_new_tokens=2)
    err = capsys.readouterr().err
    assert 'refused: nf4: bitsandbytes is not installed' in err
    assert set(t['mode']) == {'fp32', 'fp32-repeat'}
    assert 'Refused: nf4: bitsandbytes is not installed' in (tmp_path/'precision.md').read_text()
    with pytest.raises(InputError, match='no precision could run here'):
        precision_audit(tmp_path/'none', tiny, ['int8'], qs, imgs, device='cpu', limit=2, quiet=True)
    with pytest.raises(InputError, match="unknown precision 'fp8'"): precision_audit(tmp_path, 'm', ['fp8'])


def test_no_questions_refused_before_any_mode_runs(tmp_path):
    with pytest.raises(InputError, match='no questions for the model to answer'): precision_audit(tmp_path, '/nonexistent/model', ['fp32'])
    assert not (tmp_path/'runs').exists()


def test_keep_leaves_small_modules_unquantised(tiny_dirs, bench, tmp_path):
    "The tiny Qwen2-VL's 32-wide vision tower in 4-bit: refused with the reason where this CPU cannot run it, run where it can; with keep it runs everywhere."
    from pope_audit.interface.precision import cpu_4bit_accepts
    qs, imgs = bench
    kw = dict(questions=qs, images=imgs, device='cpu', n_boot=0, limit=2, max_new_tokens=2, quiet=True)
    t = precision_audit(tmp_path/'plain', str(tiny_dirs['qwen2-vl']), ['fp32', 'nf4'], **kw)
    md = (tmp_path/'plain'/'precision.md').read_text()
    if cpu_4bit_accepts(32):      # no AVX512-BF16 repacking on this CPU: bitsandbytes dequantises and runs any width
        assert set(t['mode']) == {'fp32', 'nf4', 'fp32-repeat'} and 'Refused' not in md
    else:
        assert set(t['mode']) == {'fp32', 'fp32-repeat'}
        assert 'Refused: nf4: failed to load or run' in md and 'need layer widths that are multiples of 64' in md
    t = precision_audit(tmp_path/'keep', str(tiny_dirs['qwen2-vl']), ['fp32', 'nf4'], keep=['model.visual'], **kw)
    assert set(t['mode']) == {'fp32', 'nf4', 'fp32-repeat'}
    q = json.loads((tmp_path/'keep'/'runs'/'nf4'/'manifest.json').read_text())['identity']['quantization']
    assert q['method'] == 'bitsandbytes-4bit' and q['unquantised_linear_layers'] > 1


def test_cpu_4bit_capability_branches(monkeypatch):
    "The capability check follows bitsandbytes' own CPU path: with its AVX512-BF16 repacking forced off, a 32-wide layer runs."
    import bitsandbytes.nn.modules as m
    from bitsandbytes.functional import has_avx512bf16
    from pope_audit.interface.precision import cpu_4bit_accepts
    assert cpu_4bit_accepts(64) and cpu_4bit_accepts(32) == (not has_avx512bf16())
    monkeypatch.setattr(m, 'has_avx512bf16', lambda: False)
    assert cpu_4bit_accepts(32)


def test_precision_command(tiny, bench, tmp_path, capsys):
    "`pope-audit precision`: a model on question files, JSON, exit 2 on bad input, --demo with a bitsandbytes mode and the control."
    from pope_audit.interface.cli import main
    qs, imgs = bench
    main(['precision', '--model', tiny, '--precisions', 'fp32', 'bf16', 'nf4', '--questions', imgs.parent/'synthetic_pope_random.json',
          '--images', imgs, '--limit', '3', '--max-new-tokens', '2', '--boot', '50', '--device', 'cpu', '--out', tmp_path/'p'])
    out = capsys.readouterr().out
    assert 'control (fp32 against a second fp32 run): 0 decisions changed' in out
    assert set(pd.read_csv(tmp_path/'p'/'precision.csv')['mode']) == {'fp32', 'bf16', 'nf4', 'fp32-repeat'}
    for args, msg in [(['--out', tmp_path/'x'], 'give --model and --out'), (['--model', tiny, '--precisions', 'fp8', '--out', tmp_path/'x'], "unknown precision 'fp8'")]:
        with pytest.raises(SystemExit) as e: main(['precision', *args])
        assert e.value.code == 2 and msg in capsys.readouterr().err
    main(['precision', '--demo', '--demo-images', '10', '--precisions', 'fp32', 'bf16', 'int8', '--device', 'cpu', '--boot', '50', '--out', tmp_path/'demo', '--json'])
    rows = pd.DataFrame(json.loads(capsys.readouterr().out))
    assert set(rows['mode']) == {'fp32', 'bf16', 'int8', 'fp32-repeat'} and rows[rows['mode'] == 'fp32-repeat'].changed.sum() == 0
