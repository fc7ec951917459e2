#!/usr/bin/env python3
"""Writes fuzz/seeds/deep/*.bin: OP_MSG requests (and one reply) nested about
60, 190 and 250 BSON levels (documents and arrays) through every construct
the analysis walks: $and/$or/$nor, $not, $elemMatch, nested arrays and
documents in filters, projections and sorts, $set values, _id values, and
the sub-pipelines of $lookup, $facet and $unionWith. Those at ~60 and ~190
pass wirelint's depth check (200) and reach the walks; those at ~250 are
skipped as too deep. scripts/fuzz.sh copies them into every target's corpus;
tests/fuzz_corpus.rs replays them and checks which reach the walks.

Needs pymongo's bson (pip install pymongo).
"""
import bson, struct, sys, os
sys.setrecursionlimit(20000)
def msg(doc, rid=1):
    body=b'\x00'+bson.encode(doc)
    return struct.pack('<iiii',16+4+len(body),rid,0,2013)+struct.pack('<I',0)+body
def nest(depth, leaf, wrap, per=1):
    # depth counts BSON levels (documents and arrays); each wrap adds `per`.
    v=leaf
    for _ in range(max(1,(depth-4)//per)): v=wrap(v)
    return v
out={}
for depth in (60,190,250):
    for op in ('$and','$or','$nor'):
        out[f'deep-{op[1:]}-{depth}']=msg({'find':'c','filter':nest(depth,{'a':1},lambda v:{op:[v]},2),'$db':'d'})
    out[f'deep-not-{depth}']=msg({'find':'c','filter':{'a':nest(depth,{'$eq':1},lambda v:{'$not':v})},'$db':'d'})
    out[f'deep-elemmatch-{depth}']=msg({'find':'c','filter':nest(depth,{'a':1},lambda v:{'b':{'$elemMatch':v}},2),'$db':'d'})
    docs=nest(depth,{'a':1},lambda v:{'a':v})
    out[f'deep-arrays-{depth}']=msg({'find':'c','filter':{'a':nest(depth,[1],lambda v:[v])},'$db':'d'})
    out[f'deep-projection-{depth}']=msg({'find':'c','filter':{'a':1},'projection':docs,'sort':docs,'$db':'d'})
    out[f'deep-update-{depth}']=msg({'update':'c','updates':[{'q':{'a':1},'u':{'$set':{'x':nest(depth-3,{'a':1},lambda v:{'a':v})}}}],'$db':'d'})
    out[f'deep-insert-id-{depth}']=msg({'insert':'c','documents':[{'_id':nest(depth-2,{'a':1},lambda v:{'a':v}),'v':1}],'$db':'d'})
    st={'$match':{'a':1}}
    out[f'deep-lookup-{depth}']=msg({'aggregate':'c','pipeline':[nest(depth,st,lambda s:{'$lookup':{'from':'o','pipeline':[s],'as':'x'}},3)],'cursor':{},'$db':'d'})
    out[f'deep-facet-{depth}']=msg({'aggregate':'c','pipeline':[nest(depth,st,lambda s:{'$facet':{'f':[s]}},3)],'cursor':{},'$db':'d'})
    out[f'deep-unionwith-{depth}']=msg({'aggregate':'c','pipeline':[nest(depth,st,lambda s:{'$unionWith':{'coll':'o','pipeline':[s]}},3)],'cursor':{},'$db':'d'})
    # a reply whose documents nest deep, after a find request
    req=msg({'find':'c','filter':{'a':1},'$db':'d'},rid=7)
    rep_body=b'\x00'+bson.encode({'cursor':{'id':0,'ns':'d.c','firstBatch':[{'_id':1,'v':nest(depth-3,{'a':1},lambda v:{'a':v})}]},'ok':1.0})
    rep=struct.pack('<iiii',16+4+len(rep_body),8,7,2013)+struct.pack('<I',0)+rep_body
    out[f'deep-reply-{depth}']=req+rep
here=os.path.dirname(os.path.abspath(__file__))
for name,data in out.items():
    open(os.path.join(here,'deep',name+'.bin'),'wb').write(data)
print(len(out),'deep seeds written to',os.path.join(here,'deep'))
