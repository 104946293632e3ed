# Two images from one file:
#   docker build --target service -t gac-service .   (web + DB stack, no torch)
#   docker build --target agent   -t gac-agent .     (torch + HTTP client, no DB stack)
FROM python:3.11-slim AS base
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1
WORKDIR /app
COPY pyproject.toml README.md ./
COPY gac gac
COPY service service
COPY profiler_agent profiler_agent
COPY solver solver
COPY migrations migrations
COPY proof proof

FROM base AS service
RUN pip install ".[service,postgres]"
EXPOSE 8000
HEALTHCHECK --interval=10s --timeout=3s CMD python -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8000/readyz')"
CMD ["gac", "serve", "--host", "0.0.0.0", "--port", "8000", "--workers", "2"]

FROM base AS agent
# The CUDA build of torch comes from PyPI; nvidia-ml-py reads clocks and throttle reasons.
RUN pip install ".[cuda]"
ENTRYPOINT ["gac", "agent", "run"]
