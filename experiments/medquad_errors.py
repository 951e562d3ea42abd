"""Where a medquad-cdv run's top-1 errors come from (issue 8): the wrong passage of the right document (wrong
aspect), a passage of another document with the right aspect (wrong entity), or neither; and R@1 per aspect.

    capr eval --benchmark medquad-cdv -r dense --model MODEL --run-out model.run
    .venv/bin/python bench/medquad_errors.py model.run [--data-dir ../shared/data]
"""
import collections, gzip, json, sys
D = sys.argv[3] if len(sys.argv) > 3 and sys.argv[2] == "--data-dir" else "../shared/data"
qs={json.loads(l)['qid']:json.loads(l) for l in gzip.open(D + '/medquad_cdv_test/queries.jsonl.gz')}
ps={json.loads(l)['pid']:json.loads(l) for l in gzip.open(D + '/medquad_cdv_test/passages.jsonl.gz')}
top={}
for l in open(sys.argv[1]):
    q,_,p,r,*_=l.split()
    if r=='1': top[q]=p
by=collections.defaultdict(lambda:[0,0]); kinds=collections.Counter()
for q,p in top.items():
    rec=qs[q]; ok=p in rec['relevant_pids']
    by[rec['aspect_heading']][0]+=ok; by[rec['aspect_heading']][1]+=1
    if not ok:
        g=ps[rec['relevant_pids'][0]]; t=ps[p]
        kinds['same document, wrong aspect' if t['doc_id']==g['doc_id'] else ('same entity, other document' if t['entity']==g['entity'] else ('right aspect, wrong entity' if t['aspect']==g['aspect'] else 'wrong entity and aspect'))]+=1
print(kinds)
for a,(o,n) in sorted(by.items(), key=lambda x:-x[1][1]): print(f'{a:35s} {n:5d} {100*o/n:6.1f}')
