#!/usr/bin/env python3
# Splits a leasebench CPU profile by component (the first rule whose pattern appears in a
# sample's stack wins), for the table in docs/benchmarks-lease.md. The patterns name the
# local queue and the outbox both as packages of their own and as they were in
# store/embedded, so that a profile of an older binary splits the same way.
# Usage: python3 bench/profsplit.py BINARY PROFILE
import sys, re, subprocess, collections
out=subprocess.run(['go','tool','pprof','-traces',sys.argv[1],sys.argv[2]],capture_output=True,text=True).stdout
blocks=out.split('-----------+-------------------------------------------------------')
rules=[
 ('origin (test server)', ['net/http.(*conn).serve','origintest.','main.newOrigin','main.(*slowOrigin)']),
 ('colly', ['gocolly']),
 ('store: page (sha256, zstd, write)', ['embedded.(*Store).PutPage']),
 ('store: fetch_result', ['embedded.(*Store).PutFetchResult']),
 ('outbox: put', ['embedded.(*Outbox).PutReport','outbox.(*Outbox).PutReport']),
 ('outbox: read+delete (sender)', ['embedded.(*Outbox).PendingReports','embedded.(*Outbox).DeleteReport','outbox.(*Outbox).PendingReports','outbox.(*Outbox).DeleteReport']),
 ('local queue: commit of a task end (page, result, record)', ['localqueue.(*Queue).CommitTask','localqueue.(*Queue).commitEnd']),
 ('outbox: commit of a task end', ['outbox.(*Outbox).CommitTask']),
 ('store: latest page (conditional request)', ['embedded.(*Store).LatestPage']),
 ('local queue: report', ['embedded.(*Queue).Report','localqueue.(*Queue).Report']),
 ('local queue: lease', ['embedded.(*Queue).Lease','localqueue.(*Queue).Lease']),
 ('local queue: submit (setup)', ['embedded.(*Queue).Submit','embedded.OpenQueue','localqueue.(*Queue).Submit','localqueue.Open']),
 ('text extraction', ['htmltext.']),
 ('fetch: dial (guard)', ['fetch.New.func1','netguard.(*Guard).DialContext']),
 ('fetch: request/response', ['fetch.(*Fetcher)','net/http.(*persistConn)','net/http.(*Transport)']),
 ('engine/limiter/lease other', ['engine.','limiter.','lease.']),
 ('probe client (bare)', ['main.runBare']),
 ('pebble background (flush, compaction, WAL)', ['pebble/v2.(*DB).compact','pebble/v2.(*DB).flush','pebble/v2/record.','pebble/v2.(*commitPipeline)','pebble/v2/wal','pebble/v2.(*DB).maybeSchedule','pebble/v2/vfs','pebble']),
 ('GC', ['runtime.gcBgMarkWorker','runtime.bgsweep','runtime.bgscavenge','runtime.gcDrain']),
 ('scheduler/netpoll/runtime', ['runtime.']),
]
tot=0;c=collections.Counter()
for b in blocks:
    lines=[l for l in b.strip().split('\n') if l.strip()]
    # A sample with pprof labels (Pebble's flush, compaction and WAL sync goroutines) opens
    # with a line per label ("pebble:  wal-sync"); its time is on the first line after.
    while lines and not re.match(r'\s*\d+(?:\.\d+)?(ms|s|us|ns|hrs|mins)\s',lines[0]): lines=lines[1:]
    if not lines: continue
    m=re.match(r'\s*(\d+(?:\.\d+)?)(ms|s|us|ns|hrs|mins)\s+(.*)',lines[0])
    if not m: continue
    v=float(m.group(1)); u=m.group(2)
    v*={'ns':1e-9,'us':1e-6,'ms':1e-3,'s':1,'mins':60,'hrs':3600}[u]
    frames=[m.group(3)]+[l.strip() for l in lines[1:]]
    tot+=v
    for name,pats in rules:
        if any(p in f for f in frames for p in pats):
            c[name]+=v;break
    else: c['other']+=v
for k,v in c.most_common(): print(f"| {k} | {v:.2f} s | {100*v/tot:.0f} % |")
print(f"| total | {tot:.2f} s | |")
