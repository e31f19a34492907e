import yaml
from advisor.core.spec import parse_spec
from advisor.core.pei.iteration import predict_iteration
d=yaml.safe_load(open("advisor/data/resnet50.spec.yaml")); s=parse_spec(d)
for B in (128,256):
  for mode in ("ps","nccl"):
    r=[predict_iteration(s,w,mode,batch=B//w) for w in (1,2,4)]
    print(B,mode,[round(x.total,4) for x in r],[round(r[0].total/x.total,3) for x in r], [(round(x.t_read,4),round(x.t_update,4)) for x in r])
