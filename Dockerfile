# driftguard in an empty image: one statically linked binary, run as non-root.
# scripts/build-image.sh compiles the binary on the host with
#   RUSTFLAGS="-C target-feature=+crt-static" cargo build --profile dist --target x86_64-unknown-linux-gnu
# and copies it to target/image/, so building the image needs no base image and
# no registry.
FROM scratch
COPY target/image/driftguard /driftguard
USER 65532:65532
EXPOSE 8443 8080
ENTRYPOINT ["/driftguard"]
CMD ["serve", "--tls-cert=/tls/tls.crt", "--tls-key=/tls/tls.key"]
