package io.jetlake.sql;

import java.lang.reflect.Method;
import org.apache.spark.connect.proto.AddArtifactsRequest;
import org.apache.spark.connect.proto.ExecutePlanResponse;
import org.apache.spark.connect.proto.ReleaseSessionRequest;
import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.connect.service.SessionHolder;
import org.apache.spark.sql.connect.service.SparkConnectService;
import org.sparkproject.connect.grpc.ForwardingServerCall;
import org.sparkproject.connect.grpc.ForwardingServerCallListener;
import org.sparkproject.connect.grpc.Metadata;
import org.sparkproject.connect.grpc.ServerCall;
import org.sparkproject.connect.grpc.ServerCallHandler;
import org.sparkproject.connect.grpc.ServerInterceptor;
import org.sparkproject.connect.grpc.Status;

/**
 * Spark Connect's door: who the client is, which account its session reads, and how many rows
 * one result may have ({@code spark.connect.grpc.interceptor.classes}).
 *
 * <p>With logins on ({@link NatsLogins#on}), every call carries a bearer token ({@code
 * sc://host:port/;token=...}) that is a NATS login, checked by logging in to the NATS server;
 * none, or one the server refuses, ends the call UNAUTHENTICATED. The client's session is bound
 * to the login's account before Spark sees the request (the system account's to all), so the
 * plan check ({@link AccountWalls}) walls every query of it; a session another account's login
 * opened is refused to this one (PERMISSION_DENIED), as are uploads of code (artifacts) to a
 * walled session. Whatever the logins, a result past the service's max rows ends its call
 * RESOURCE_EXHAUSTED, and its Spark jobs are interrupted.
 */
public final class ConnectDoor implements ServerInterceptor {
  private static final Metadata.Key<String> AUTHORIZATION =
      Metadata.Key.of("Authorization", Metadata.ASCII_STRING_MARSHALLER);
  private static final String BEARER = "Bearer ";
  private static volatile long maxRows = Long.MAX_VALUE;

  /** Rows one result may have (the service's max_rows). */
  public static void limit(long rows) {
    maxRows = rows;
  }

  /** Rows one result may have, at every door that counts them ({@link JdbcOperations}). */
  static long maxRows() {
    return maxRows;
  }

  @Override
  public <Q, R> ServerCall.Listener<Q> interceptCall(
      ServerCall<Q, R> call, Metadata headers, ServerCallHandler<Q, R> next) {
    NatsLogins.Login login = null;
    if (NatsLogins.on()) {
      String header = headers.get(AUTHORIZATION);
      if (header == null || !header.startsWith(BEARER)) {
        String hint = " (sc://host:port/;token=user:password)";
        return refuse(call, Status.UNAUTHENTICATED, NatsLogins.NO_LOGIN + hint);
      }
      login = NatsLogins.check(NatsLogins.fromToken(header.substring(BEARER.length())));
      if (login.refused() != null) {
        return refuse(call, Status.UNAUTHENTICATED, login.refused());
      }
    }
    Counted<Q, R> counted = new Counted<>(call);
    return new Claim<>(next.startCall(counted, headers), counted, login);
  }

  private static <Q> ServerCall.Listener<Q> refuse(
      ServerCall<Q, ?> call, Status status, String why) {
    call.close(status.withDescription(why), new Metadata());
    return new ServerCall.Listener<>() {};
  }

  /** Binds the request's session to the login's account, or refuses the call. */
  private static final class Claim<Q, R>
      extends ForwardingServerCallListener.SimpleForwardingServerCallListener<Q> {
    private final Counted<Q, R> call;
    private final NatsLogins.Login login;
    private boolean closed;

    Claim(ServerCall.Listener<Q> delegate, Counted<Q, R> call, NatsLogins.Login login) {
      super(delegate);
      this.call = call;
      this.login = login;
    }

    @Override
    public void onMessage(Q request) {
      if (closed) {
        return;
      }
      String refused = claim(request);
      if (refused != null) {
        closed = true;
        call.close(Status.PERMISSION_DENIED.withDescription(refused), new Metadata());
        return;
      }
      super.onMessage(request);
    }

    @Override
    public void onHalfClose() {
      if (!closed) {
        super.onHalfClose();
      }
    }

    private String claim(Object request) {
      if (request instanceof ReleaseSessionRequest) { // ends a session, opens none
        return null;
      }
      String user = userId(request);
      String sessionId = (String) field(request, "getSessionId");
      if (user == null || sessionId == null || sessionId.isEmpty()) {
        return null; // Spark answers a request without a session with its own error
      }
      SessionHolder holder;
      try {
        holder =
            SparkConnectService.getOrCreateIsolatedSession(user, sessionId, scala.Option.empty());
      } catch (RuntimeException e) { // a closed session, a bad id: Spark says so itself
        return null;
      }
      call.holder = holder;
      if (login == null) {
        return null;
      }
      SparkSession session = holder.session();
      String owner = AccountWalls.claim(session, login.system() ? null : login.account());
      if (owner != null) {
        return "session " + sessionId + " is account " + owner + "'s, not "
            + login.account() + "'s";
      }
      if (!login.system() && request instanceof AddArtifactsRequest) {
        return "account " + login.account() + " may not add artifacts (code) to the service";
      }
      return null;
    }
  }

  /** Counts the rows a call sends; past max rows it ends the call and its operation. */
  private static final class Counted<Q, R>
      extends ForwardingServerCall.SimpleForwardingServerCall<Q, R> {
    volatile SessionHolder holder;
    private long rows;
    private boolean over;

    Counted(ServerCall<Q, R> delegate) {
      super(delegate);
    }

    @Override
    public synchronized void sendMessage(R message) {
      if (over) {
        return;
      }
      if (message instanceof ExecutePlanResponse r && r.hasArrowBatch()) {
        rows += r.getArrowBatch().getRowCount();
        long limit = maxRows;
        if (rows > limit) {
          over = true;
          SessionHolder h = holder;
          if (h != null) {
            h.interruptOperation(r.getOperationId());
          }
          super.close(
              Status.RESOURCE_EXHAUSTED.withDescription(
                  "the result has more than " + limit + " rows, the service's max_rows"
                      + " (lake { sql { max_rows } }): aggregate, or add a LIMIT"),
              new Metadata());
          return;
        }
      }
      super.sendMessage(message);
    }

    @Override
    public synchronized void close(Status status, Metadata trailers) {
      if (!over) {
        super.close(status, trailers);
      }
    }
  }

  private static String userId(Object request) {
    Object context = field(request, "getUserContext");
    return context == null ? null : (String) field(context, "getUserId");
  }

  /** A getter every Connect request has under the same name (they share no interface). */
  private static Object field(Object message, String getter) {
    try {
      Method m = message.getClass().getMethod(getter);
      return m.invoke(message);
    } catch (ReflectiveOperationException e) {
      return null;
    }
  }
}
