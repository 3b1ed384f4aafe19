"Image-clustered intervals wherever the package prints one: precision shifts and gap changes, corrections against the baseline, attention's difference in means, and the confounds chapter's tables — each resamples whole images by default, from metrics' one implementation, with the question-level form one argument away."
import numpy as np
import pandas as pd
import pytest
from pope_audit.foundation.readouts import Record, READOUTS
from pope_audit.foundation.metrics import paired_boot, percentile_interval, diff_ci, bootstrap_ci, boot_totals, cluster_codes, image_clusters, clustered_mcnemar

N_IMG = 40

def _rec(i, label, m, image, **kw):
    return Record('adversarial', i, image, f'q{i}', label, logits={1: float(m), 2: 0.0}, derived={'yes': [1], 'no': [2]},
                  greedy_id=1 if m >= 0 else 2, text='Yes' if m >= 0 else 'No', logsumexp=20.0, **kw)

def _runs():
    "Two runs of 40 images × 6 questions: the second turns every answer of every fourth image wrong (whole images move together)."
    lab = ['yes', 'no'] * 3
    ref, low = [], []
    for g in range(N_IMG):
        for j, l in enumerate(lab):
            i, m = 6 * g + j, 2.0 if l == 'yes' else -2.0
            ref.append(_rec(i, l, m, f'{g}.jpg'))
            low.append(_rec(i, l, -m if g % 4 == 0 else m, f'{g}.jpg'))
    return ref, low

def _width(lo, hi): return hi - lo


def test_stratified_resamples_keep_the_label_balance():
    "Drawn within label, every resample has exactly the original positives; drawn freely, it does not."
    lab = np.array(['yes'] * 30 + ['no'] * 70)
    x = (lab == 'yes')[:, None].astype(float)
    assert set(boot_totals(x, cluster_codes(None, 100), 200, strata=lab)[:, 0]) == {30.0}
    assert len(set(boot_totals(x, cluster_codes(None, 100), 200)[:, 0])) > 5


def test_image_clusters():
    assert image_clusters(['a', 'b']).tolist() == ['a', 'b']
    assert image_clusters(['a', ' ']) is None and image_clusters(['a', 'b'], 'questions') is None
    with pytest.raises(ValueError, match='resample must be one of'): image_clusters(['a'], 'pixels')


def test_precision_shift_interval_by_image():
    "compare_runs' shift interval is metrics.paired_boot's over whole images; by question it is narrower here (whole images flip)."
    from pope_audit.interface.precision import compare_runs, gap_table
    ref, low = _runs()
    runs = {'ref': ref, 'low': low}
    row = lambda t: t[(t['mode'] == 'low') & (t.readout == 'derived')].iloc[0]
    img, q = row(compare_runs(runs, n_boot=500)), row(compare_runs(runs, n_boot=500, resample='questions'))
    a, b = [READOUTS['derived'](r) for r in ref], [READOUTS['derived'](r) for r in low]
    lab, im = [r.label for r in ref], [r.image for r in ref]
    want = percentile_interval(np.diff(paired_boot([a, b], lab, 'f1', 500, 0, im), axis=0)[0])
    assert (img.shift_lo, img.shift_hi) == pytest.approx(want, abs=1e-12)
    assert _width(img.shift_lo, img.shift_hi) > 1.5 * _width(q.shift_lo, q.shift_hi)
    gi, gq = gap_table(runs, n_boot=300), gap_table(runs, n_boot=300, resample='questions')
    assert gi.change_lo.notna().sum() == 1 and gi.loc[1, ['change_lo', 'change_hi']].tolist() != gq.loc[1, ['change_lo', 'change_hi']].tolist()


def test_controls_plot_interval_by_image():
    "plot_controls draws metrics.diff_ci's interval over whole images (questions when asked)."
    import matplotlib; matplotlib.use('Agg')
    import matplotlib.pyplot as plt
    from pope_audit.appendix.controls import plot_controls
    ref, low = _runs()
    recs = [_rec(r.question_id, r.label, r.margin, r.image, corrections={'vdd': dict(delta=r.margin, tau=r.margin - l.margin, frozen=False)})
            for r, l in zip(ref, low)]
    spans = {}
    for how in ('images', 'questions'):
        ax = plot_controls(recs, n_boot=500, resample=how)[0]
        seg = ax.containers[-1].lines[2][0].get_segments()[0]           # the last row's (the correction's) horizontal error bar
        spans[how] = (seg[0][0], seg[1][0]); plt.close(ax.figure)
    (base, corr), lab, im = ([READOUTS[n](r) for r in recs] for n in ('derived', 'vdd')), [r.label for r in recs], [r.image for r in recs]
    _, lo, hi = diff_ci(corr, base, lab, 'f1', 500, clusters=im)
    assert spans['images'] == pytest.approx((100 * lo, 100 * hi), abs=1e-9)
    assert _width(*spans['images']) > 1.5 * _width(*spans['questions'])


def test_attention_interval_by_image():
    "attention_report resamples whole images; the images' shift cancels in the difference when each image has one right and one wrong answer."
    from pope_audit.appendix.attention import attention_report, compare_groups
    u = np.random.default_rng(3).normal(0, 0.05, 100)
    recs = []
    for g in range(100):
        for ok, off in ((True, 0.3), (False, 0.4)):
            lab, m = 'yes', (1 + g / 50) * (1 if ok else -1)
            recs.append(_rec(2 * g + (not ok), lab, m, f'{g}.jpg', attention=dict(image_share=0.2 + off * 0.5 + u[g], per_layer=[0.2 + off * 0.5 + u[g]])))
    rep = attention_report(recs)
    c = rep['compare']
    assert c['resampled'] == 'images' and c['diff_ci'] == pytest.approx((-0.05, -0.05), abs=1e-9) and c['diff_deff'] == pytest.approx(0, abs=1e-9)
    q = attention_report(recs, resample='questions')['compare']
    assert q['resampled'] == 'questions' and q['diff_ci'][1] - q['diff_ci'][0] > 0.01


def test_confounds_gap_interval_by_image():
    "The confounds chapter's tables on the paper's adversarial records: the image interval is bootstrap_ci's / diff_ci's with the images."
    from pope_audit.appendix.confounds import interval_table, pair_table
    from pope_audit.foundation.paper import paper_records
    r = paper_records('adversarial')
    it = interval_table(r, r.image, ['two_token'], n_boot=400).iloc[0]
    assert (it.lo_images, it.hi_images) == pytest.approx(bootstrap_ci(r.two_token, r.label, n_boot=400, clusters=r.image), abs=1e-12)
    assert (it.lo_labels, it.hi_labels) == pytest.approx(bootstrap_ci(r.two_token, r.label, n_boot=400, strata=r.label), abs=1e-12)
    pt = pair_table(r, r.image, 'eight_token', 'two_token', n_boot=400).iloc[0]
    assert (pt.lo_images, pt.hi_images) == pytest.approx(diff_ci(r.eight_token, r.two_token, r.label, n_boot=400, clusters=r.image)[1:], abs=1e-12)
    assert pt.mcnemar_p_images == clustered_mcnemar(r.eight_token, r.two_token, r.label, r.image)['pvalue'] and pt.mcnemar_method == 'Obuchowski, 500 clusters'
