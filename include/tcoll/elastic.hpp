#pragma once
/// \file
/// Elastic averaging across client groups (MXNET-MPI Sec. 5, Eq. 2 and 3): `elastic::client`
/// (one rank of a group that trains synchronously inside and averages elastically with a
/// center every `interval` iterations), `elastic::server` (the rank holding the center in
/// asynchronous mode), their `elastic::options`, the update rules `center_update` (Eq. 2)
/// and `client_update` (Eq. 3) and the rank layout. See docs/elastic.md.
#include "elastic/client.hpp"
#include "elastic/options.hpp"
#include "elastic/server.hpp"
