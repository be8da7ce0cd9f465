package dev.runnel.bench.flink.nexmark;

import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.atomic.AtomicLong;

/**
 * The generator alone: what producing the Nexmark events costs in Java without an engine, the bound no
 * job over {@link NexmarkSource} can pass. {@code p} threads each make their share of the stream as a
 * source subtask does (event {@code n} for {@code n ≡ s (mod p)}, every field of every {@link
 * Model.Event}, strings included), and fold a value of each event into a sum that is printed, so that
 * the JIT cannot drop the work. events/s = events ÷ the time from starting the threads to the last one
 * ending.
 */
public final class GeneratorLimit {
    private GeneratorLimit() {}

    /** Generates events 0 … events−1 on p threads once and returns events/s. */
    public static double once(int p, long events, long seed) throws InterruptedException {
        AtomicLong sum = new AtomicLong();
        List<Thread> threads = new ArrayList<>();
        long t0 = System.nanoTime();
        for (int s = 0; s < p; s++) {
            final int subtask = s;
            Thread t = new Thread(() -> {
                Generator g = new Generator(seed, 0, 0);
                long acc = 0;
                for (long n = subtask; n < events; n += p) {
                    acc += fold(g.event(n));
                }
                sum.addAndGet(acc);
            }, "nexmark-limit-" + s);
            threads.add(t);
            t.start();
        }
        for (Thread t : threads) {
            t.join();
        }
        long ns = System.nanoTime() - t0;
        if (sum.get() == 42) {
            System.err.println("nexmark-limit: fold " + sum.get()); // never true in practice; keeps sum live
        }
        return events / (ns / 1e9);
    }

    /** A value that depends on every string of the event, so that none of them can be skipped. */
    static long fold(Model.Event e) {
        switch (e.kind) {
            case Model.Event.PERSON:
                return e.person.id + e.person.name.length() + e.person.emailAddress.length()
                        + e.person.creditCard.length() + e.person.city.length() + e.person.state.length()
                        + e.person.extra.length();
            case Model.Event.AUCTION:
                return e.auction.id + e.auction.itemName.length() + e.auction.description.length()
                        + e.auction.extra.length();
            default:
                return e.bid.price + e.bid.channel.length() + e.bid.url.length() + e.bid.extra.length();
        }
    }
}
