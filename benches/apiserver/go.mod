module driftguard.example/benches/apiserver

go 1.26
