/* Thread-local error reporting: the first error since the last clear wins. */
#include <stdarg.h>
#include <stdio.h>

#include "tensor.h"

static _Thread_local char err_msg[512];
static _Thread_local int err_status;

const char *tensor_last_error(void)
{
	return err_msg;
}

int tensor_last_status(void)
{
	return err_status;
}

void tensor_clear_error(void)
{
	err_msg[0] = '\0';
	err_status = TENSOR_OK;
}

int tensor_error(int status, const char *fmt, ...)
{
	if (err_status == TENSOR_OK) {
		va_list ap;
		va_start(ap, fmt);
		vsnprintf(err_msg, sizeof err_msg, fmt, ap);
		va_end(ap);
		err_status = status;
	}
	return status;
}

const char *tensor_status_string(int status)
{
	switch (status) {
	case TENSOR_OK: return "ok";
	case TENSOR_ERR_SHAPE: return "shape error";
	case TENSOR_ERR_DTYPE: return "dtype error";
	case TENSOR_ERR_DEVICE: return "device error";
	case TENSOR_ERR_NOMEM: return "out of memory";
	case TENSOR_ERR_UNSUPPORTED: return "unsupported";
	case TENSOR_ERR_IO: return "I/O error";
	case TENSOR_ERR_ARG: return "bad argument";
	case TENSOR_ERR_CUDA: return "CUDA error";
	case TENSOR_ERR_STATE: return "invalid state";
	case TENSOR_ERR_COMM: return "communication error";
	default: return "unknown error";
	}
}
