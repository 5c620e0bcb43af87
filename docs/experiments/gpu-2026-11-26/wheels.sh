#!/usr/bin/env bash
# Builds .whl/ (ignored by git), the wheels call 2 carried to the GPU machine: what its image lacks for the
# toolkit and its tests, for CPython 3.12 on x86-64, 26 MiB. Run from the checkout's root with the venv active.
set -eu
mkdir -p .whl
PLATFORMS="--platform manylinux_2_28_x86_64 --platform manylinux_2_24_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64"
pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp $PLATFORMS -d .whl \
    transformers==4.57.6 tokenizers==0.22.2 huggingface_hub==0.36.2 flair==0.15.1 bioc==2.1 boto3==1.44.8 \
    botocore==1.44.8 s3transfer==0.19.3 jmespath==1.1.0 conllu==4.5.3 Deprecated==1.3.1 ftfy==6.3.1 wcwidth==0.9.4 \
    gdown==6.5.1 beautifulsoup4==4.15.0 soupsieve==4.1.3 PySocks==1.7.1 gensim==4.4.0 smart_open==9.0.2 \
    intervaltree==3.2.1 jsonlines==4.0.0 more-itertools==11.2.1 mpld3==0.5.12 pytorch_revgrad==0.2.0 segtok==1.5.11 \
    tenacity==9.1.4 transformer-smaller-training-vocab==0.4.2 Wikipedia-API==0.16.0 platformdirs==4.14.8
# published only as source archives: built here (pure Python)
pip wheel -q --no-deps --no-build-isolation -w .whl seqeval==1.2.2 langdetect==1.0.9 pptree==3.1 sqlitedict==2.1.0 docopt==0.6.2
# the two large wheels without what nothing here loads: gensim's own test data, botocore's per-service data
python3 - <<'EOF'
import glob, os, zipfile
def trim(path, drop):
    tmp = path + ".tmp"
    with zipfile.ZipFile(path) as zi, zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED, compresslevel=9) as zo:
        for info in zi.infolist():
            if not drop(info.filename):
                zo.writestr(info, zi.read(info.filename))
    os.replace(tmp, path)
trim(glob.glob(".whl/botocore-*.whl")[0], lambda n: n.startswith("botocore/data/") and n.count("/") > 2)
trim(glob.glob(".whl/gensim-*.whl")[0], lambda n: n.startswith("gensim/test/"))
EOF
du -sh .whl
