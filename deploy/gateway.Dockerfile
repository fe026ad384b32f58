# The gateway image: SMG (the Shepherd Model Gateway) at the version the tests pin.
#   docker build -f deploy/gateway.Dockerfile -t smg:1.13.0 deploy
FROM python:3.11-slim
RUN pip install --no-cache-dir "smg==1.13.0"
USER 65532:65532
EXPOSE 30000 29000
ENTRYPOINT ["smg"]
CMD ["launch", "--help"]
