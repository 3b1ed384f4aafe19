"`pope-audit demo` end to end at reduced size: a report whose numbers come from a model that learned the task."
import pandas as pd
from pope_audit.interface.cli import main
from pope_audit.benchmarks.scoring import read_records, predictions


def test_demo_command(tmp_path, capsys, shared):
    main(['demo', '--model', 'tiny', '--out', str(tmp_path/'demo'), '--images', '30'])   # SmolLM2's demo: test_smollm2.py
    out = capsys.readouterr().out
    last = out.strip().splitlines()[-1]
    assert last == f"report: {tmp_path/'demo'/'report.html'}"
    assert 'yes-push control and the corrections, adversarial split' in out
    kinds = {l.split()[0]: l.split()[1] for l in out.splitlines() if l.startswith('  ') and len(l.split()) > 2}
    assert {m: kinds.get(m) for m in ('baseline', 'yes_push', 'ugaa', 'vdd', 'clip-certainty')} == dict(
        baseline='baseline', yes_push='control', ugaa='correction', vdd='correction', **{'clip-certainty': 'correction'})   # a control is not called a correction
    md = (tmp_path/'demo'/'report.md').read_text()
    assert 'Corrections against the baseline, with their controls' in md
    assert 'tiny synthetic model' in md and 'pope-audit run --model llava-hf/llava-1.5-7b-hf' in md
    p = predictions(read_records(tmp_path/'demo'/'run'))
    assert len(p) == 540 and (p.derived == p.greedy).all() and (p.two_token != p.greedy).any()
    st = pd.read_csv(tmp_path/'demo'/'scores.csv').set_index(['readout', 'split'])
    assert st.loc[('derived', 'random'), 'f1'] > 0.7                                   # 0.750 with the shipped model
    assert st.loc[('derived', 'pooled'), 'f1'] > st.loc[('two_token', 'pooled'), 'f1']  # 0.757 vs 0.716
    # with `yes`/`no` trained on text, the two-token readout leans yes (0.741) where the model's answers do not (0.513)
    assert st.loc[('two_token', 'pooled'), 'yes_rate'] > 0.65 > st.loc[('derived', 'pooled'), 'yes_rate']
