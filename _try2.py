import yaml, sys, collections
import advisor.core.pei.kernels as K
import advisor.core.pei.layers as Lm
from advisor.core.spec import parse_spec
from advisor.core.pei.layers import network_times
T6={("alexnet","P40"):(0.03494,0.10996),("alexnet","K80"):(0.08843,0.29054),("alexnet","K40"):(0.0907,0.2958),
("resnet50","P40"):(0.0331,0.097),("resnet50","K80"):(0.087,0.267),("resnet50","K40"):(0.0869,0.2609)}
orig=K.kernel_time
def nofloor(k,gpu,dop=1.0,sms=None):
    r=orig(k,gpu,dop,sms)
    import dataclasses
    t=r.cycles/(gpu.clock_mhz*1e6)
    return dataclasses.replace(r,seconds=t,memory_bound=False)
import itertools
for floor,fftok in itertools.product([True,False],[True,False]):
    Lm.kernel_time = orig if floor else nofloor
    ofast=Lm._fastest
    def fastest(opts,gpu,dop,_o=ofast):
        if not fftok: opts={k:v for k,v in opts.items() if k!="fft"}
        return _o(opts,gpu,dop)
    Lm._fastest=fastest
    out=[]
    for net in ["alexnet","resnet50"]:
        d=yaml.safe_load(open(f"advisor/data/{net}.spec.yaml"))
        for g in ["P40","K80","K40"]:
            d["gpu"]=g; s=parse_spec(d)
            lt=network_times(s.layers,s.batch,s.gpu,1.0,32)
            f=sum(l.forward.seconds for l in lt); b=sum(l.backward.seconds for l in lt)
            tf,tfb=T6[(net,g)]
            out.append(f"{net[:4]} {g} f={f:.4f}({(f/tf-1)*100:+.0f}%) fb={f+b:.4f}({((f+b)/tfb-1)*100:+.0f}%)")
    Lm._fastest=ofast
    print("floor",floor,"fft",fftok); print("\n".join(out))
