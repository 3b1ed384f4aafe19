"A toy yes/no benchmark added from outside the package, through the registry alone (the architecture chapter's worked example): its questions a JSON list of {id, image, question, label}, its answers a JSON object {id: reply}."
import json
import pandas as pd
from pope_audit.benchmarks.benchmark import Benchmark, register
from pope_audit.foundation.data import ImageFolder
from pope_audit.foundation.readouts import Record, register_readout, SCOPED
from pope_audit.benchmarks.sniff import Reader
from pope_audit.foundation.metrics import score_table

GROUP = 'toy'   # its one group

def load_toy(sources, labels=None, splits=None):
    "The question table of a toy question file, and no image source."
    rows = json.loads(open(str(sources[0])).read())
    return pd.DataFrame([dict(split=GROUP, question_id=r['id'], image=r['image'], question=r['question'], label=r['label']) for r in rows]), None

@register_readout('toy', 'text', "the toy's rule: the reply's first word, lower-cased, if yes or no, else unknown")
def toy_rule(rec):
    w = (rec.text or '').strip().split(maxsplit=1)
    return w[0].lower().strip('.,!') if w and w[0].lower().strip('.,!') in ('yes', 'no') else 'unknown'
SCOPED['toy'] = (GROUP,)

def read_toy(path, questions=None, splits=None, check=None):
    "Records from a toy answer file, joined to the toy's questions by id (each join counted by `check`)."
    replies, q = json.loads(open(path).read()), {r.question_id: r for r in questions.itertuples(index=False)}
    if check is not None:
        for i in replies: check(q[int(i)])
    return [Record(GROUP, int(i), q[int(i)].image, q[int(i)].question, q[int(i)].label, text=t) for i, t in replies.items()]

# the toy's answer files: a JSON object of replies, named *.toy.json
TOY_READER = Reader('toy', 'toy answers (a JSON object {id: reply}, named *.toy.json)', lambda pk: pk.path.name.endswith('.toy.json'), read_toy)

# the toy benchmark
TOY = register(Benchmark('toy', 'A toy benchmark', 'a JSON list of {id, image, question, label}', dict(id='none', split='', columns={}),
                         load_toy, None, ImageFolder, lambda s: str(s).endswith('.toyq.json'), groups='one group', pairs=None,
                         dimensions={}, rule='toy', metrics='accuracy, F1', headline=lambda preds: score_table(preds, 'toy'),
                         group_names=(GROUP,)))

